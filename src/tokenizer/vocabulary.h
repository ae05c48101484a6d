// In-memory form of a GGUF tokenizer vocabulary (`tokenizer.ggml.*` keys), with reading from a
// gguf::File and writing to a gguf::Writer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace crossword::gguf {
class File;
class Writer;
}  // namespace crossword::gguf

namespace crossword::tokenizer {

/// `tokenizer.ggml.token_type` values (llama.cpp's llama_token_type, fixed by the GGUF files).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,  ///< Ordinary BPE token, stored in byte-level form.
  kUnknown = 2,
  kControl = 3,      ///< Special token (`<|im_end|>`): matched in text only with parse_special.
  kUserDefined = 4,  ///< Added non-special token (`<think>`): always matched in text.
  kUnused = 5,       ///< Padding entry (`[PAD151669]`): never produced, decodes to nothing.
  kByte = 6,         ///< `<0xAB>` byte token (SentencePiece vocabularies only).
};

/// Name used in messages: "normal", "control", ...
std::string_view TokenTypeName(TokenType type);

/// The vocabulary keys of a GGUF file. `tokens[i]` is the text of id i; `types` is empty (all
/// normal) or as long as `tokens`; `merges` are "LEFT RIGHT" in rank order (rank 0 first).
struct Vocabulary {
  std::string model = "gpt2";  ///< tokenizer.ggml.model
  std::string pre;             ///< tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  std::vector<std::string> merges;
  std::optional<int32_t> bos, eos, eot, pad, mask;  ///< tokenizer.ggml.{bos,...}_token_id
  bool add_bos = false;                             ///< tokenizer.ggml.add_bos_token
  std::optional<std::string> chat_template;         ///< tokenizer.chat_template
};

/// Reads the vocabulary keys. Required: tokenizer.ggml.model, tokenizer.ggml.tokens (string
/// array); for model "gpt2" also tokenizer.ggml.merges and tokenizer.ggml.pre. Optional:
/// token_type (int array of the same length), the special ids, add_bos_token, chat_template.
/// Throws crossword::Error naming the file, the key, expected vs actual type or length.
Vocabulary ReadVocabulary(const gguf::File& file);

/// Adds the vocabulary keys to `writer` (same names and types llama.cpp's converter writes:
/// strings, string arrays, int32 array for token_type, uint32 ids, bool add_bos_token).
void WriteVocabulary(const Vocabulary& vocab, gguf::Writer& writer);

}  // namespace crossword::tokenizer
