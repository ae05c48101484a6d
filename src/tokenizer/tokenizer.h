// Byte-level BPE tokenizer (GGUF `tokenizer.ggml.model = gpt2`) with the Qwen pre-tokenizers,
// added/special token matching, decoding, and a streaming decoder that emits whole UTF-8 text.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocabulary.h"

namespace crossword::gguf {
class File;
}  // namespace crossword::gguf

namespace crossword::tokenizer {

/// Ids of the tokens the engine, chat code and server need by name (absent ones are nullopt).
struct SpecialTokens {
  std::optional<int32_t> bos, eos, eot, pad, mask;     ///< From the GGUF `*_token_id` keys.
  std::optional<int32_t> im_start, im_end, endoftext;  ///< `<|im_start|>`, `<|im_end|>`, ...
  std::optional<int32_t> think, think_end;             ///< `<think>`, `</think>`
  std::optional<int32_t> tool_call, tool_call_end;     ///< `<tool_call>`, `</tool_call>`
  std::optional<int32_t> tool_response, tool_response_end;
};

/// A loaded tokenizer. Immutable after construction: every const method is thread-safe (the
/// internal piece cache is sharded and locked). Move-only.
///
/// Encoding (the Hugging Face tokenizers pipeline for a byte-level BPE tokenizer.json):
///  1. added tokens are cut out of the raw text, leftmost-longest: USER_DEFINED tokens always
///     (HF matches non-special added tokens such as `<think>` in any text), CONTROL tokens only
///     when `parse_special` is true (HF's special added tokens);
///  2. each remaining segment is NFC-normalized when the pre-tokenizer's tokenizer.json declares
///     it (qwen2, qwen35), then split by the pre-tokenizer regex;
///  3. each piece is mapped to GPT-2 byte-level symbols and merged by BPE (lowest merge rank
///     first, leftmost on ties).
/// Ill-formed UTF-8 input is allowed: its bytes become byte-level tokens, so Decode(Encode(x))
/// == NFC(x) byte for byte (== x for NFC or invalid text).
class Tokenizer {
 public:
  /// Reads the `tokenizer.ggml.*` keys (see ReadVocabulary) and builds the tokenizer. Throws
  /// crossword::Error naming the missing or invalid key, token or merge.
  static Tokenizer FromGguf(const gguf::File& file);
  /// Builds from an in-memory vocabulary. Throws crossword::Error like FromGguf: model must be
  /// "gpt2", `pre` a supported pre-tokenizer, every merge's parts and result present, all 256
  /// byte-level symbols present, special ids inside the vocabulary.
  static Tokenizer FromVocabulary(const Vocabulary& vocab);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Token ids of `text` (any bytes). `parse_special`: also match CONTROL tokens written in the
  /// text (e.g. a rendered chat template); false for untrusted user text. Never adds BOS.
  std::vector<int32_t> Encode(std::string_view text, bool parse_special) const;
  /// As Encode, appending to `out`.
  void EncodeAppend(std::string_view text, bool parse_special, std::vector<int32_t>& out) const;

  /// Raw bytes of the ids concatenated (may be ill-formed UTF-8 if the ids split a character;
  /// use StreamDecoder or AppendUtf8Lossy for display). CONTROL tokens render their text unless
  /// `render_special` is false; UNUSED tokens render nothing. Throws crossword::Error on an id
  /// outside [0, n_vocab).
  std::string Decode(std::span<const int32_t> ids, bool render_special = true) const;

  /// Stored text of a token as in `tokenizer.ggml.tokens` (byte-level form, e.g. "Ġthe").
  /// Throws crossword::Error on an id outside [0, n_vocab).
  std::string_view TokenText(int32_t id) const;
  /// Raw bytes a token decodes to (" the" for "Ġthe"; the text for CONTROL/USER_DEFINED).
  /// Throws crossword::Error on an id outside [0, n_vocab).
  std::string_view TokenBytes(int32_t id) const;
  /// Token type from `tokenizer.ggml.token_type` (kNormal when the key was absent).
  TokenType GetTokenType(int32_t id) const;
  /// Number of token ids (length of `tokenizer.ggml.tokens`, padding entries included).
  int32_t n_vocab() const;

  /// Id of the token whose stored text is exactly `text`, if any.
  std::optional<int32_t> FindToken(std::string_view text) const;

  const SpecialTokens& special() const;
  /// End-of-generation ids: eos, eot, and the CONTROL/USER_DEFINED tokens `<|im_end|>`,
  /// `<|endoftext|>`, `<|eot_id|>`, `<|end|>`, `<end_of_turn>`, `<|fim_pad|>`, `<|repo_name|>`,
  /// `<|file_sep|>` when present (llama.cpp's rule for detecting end-of-generation tokens).
  std::span<const int32_t> eog_ids() const;
  bool IsEog(int32_t id) const;

  /// The pre-tokenizer name (`tokenizer.ggml.pre`).
  std::string_view pre() const;
  /// `tokenizer.ggml.add_bos_token` (false for Qwen).
  bool add_bos() const;
  /// Whether the pre-tokenizer regex runs JIT-compiled (a speed diagnostic).
  bool regex_jit() const;

  /// Splits `text` with the pre-tokenizer only (after NFC when it applies): the pieces BPE sees.
  /// For tests and debugging.
  std::vector<std::string> PreTokenize(std::string_view text) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Incremental detokenizer for streaming output: feed ids as they are generated, get text that
/// is always complete UTF-8. Bytes of a character split over several tokens are held back until
/// the character is complete. Ill-formed bytes become U+FFFD, one per maximal ill-formed subpart,
/// as soon as they are known to be ill-formed (Rust's String::from_utf8_lossy, which HF tokenizers'
/// ByteLevel decoder uses). `Flush()` at the end turns a dangling incomplete sequence into one
/// U+FFFD, so the concatenation of all outputs equals from_utf8_lossy(Decode(all ids)).
/// Holds a reference to the tokenizer, which must outlive it. Not thread-safe (one per stream).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool render_special = true);

  /// Adds one token; returns the text that became complete (possibly empty). Throws
  /// crossword::Error on an id outside [0, n_vocab).
  std::string Feed(int32_t id);
  /// Adds several tokens.
  std::string Feed(std::span<const int32_t> ids);
  /// Ends the stream: returns U+FFFD if bytes of an incomplete character are pending, else "".
  /// The decoder can be reused afterwards.
  std::string Flush();
  /// Number of bytes held back (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string Drain(bool at_end);
  const Tokenizer* tokenizer_;
  bool render_special_;
  std::string pending_;
};

}  // namespace crossword::tokenizer
