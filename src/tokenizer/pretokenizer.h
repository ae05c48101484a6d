// Pre-tokenizers: split text into pieces before byte-level BPE, selected by the GGUF key
// `tokenizer.ggml.pre`. Regexes run on PCRE2 (UTF + Unicode properties, JIT when available).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace crossword::tokenizer {

/// A named pre-tokenizer: the split regex in its Hugging Face tokenizer.json form and the
/// normalizer the matching tokenizer.json declares.
struct PreTokenizerSpec {
  std::string_view name;  ///< `tokenizer.ggml.pre` value, e.g. "qwen35".
  std::string_view
      regex;         ///< Split pattern (Oniguruma syntax as in tokenizer.json; PCRE2-compatible).
  bool nfc = false;  ///< Apply NFC to text outside added tokens (tokenizer.json "normalizer").
};

/// Looks up a pre-tokenizer by name. Throws crossword::Error naming the unknown value and the
/// supported ones.
const PreTokenizerSpec& FindPreTokenizer(std::string_view name);

/// Finds the spec whose regex equals `regex` exactly; nullptr when none does.
const PreTokenizerSpec* FindPreTokenizerByRegex(std::string_view regex);

/// Names of all supported pre-tokenizers (for messages and docs).
std::vector<std::string_view> PreTokenizerNames();

/// A compiled split regex. Immutable after construction; `Split` is thread-safe.
/// Splitting follows tokenizer.json's Split pre-tokenizer with behavior "Isolated": every match
/// is a piece and so is every gap between matches, so the pieces always concatenate to the input.
/// Input may be ill-formed UTF-8: ill-formed bytes never match (PCRE2_MATCH_INVALID_UTF) and end
/// up in gap pieces.
class Regex {
 public:
  /// Compiles `pattern`. Throws crossword::Error with PCRE2's message and the offset on failure.
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /// Calls `emit(std::string_view piece)` for each piece of `text`, in order.
  template <typename Emit>
  void Split(std::string_view text, Emit&& emit) const {
    size_t pos = 0;
    MatchState state(*this);
    size_t start, end;
    while (pos < text.size() && state.Next(text, pos, &start, &end)) {
      if (start > pos) emit(text.substr(pos, start - pos));
      emit(text.substr(start, end - start));
      pos = end;
    }
    if (pos < text.size()) emit(text.substr(pos));
  }

  /// Convenience: all pieces as strings.
  std::vector<std::string> SplitToVector(std::string_view text) const;

  /// Whether PCRE2 JIT compilation succeeded (matching is then several times faster).
  bool jit() const { return jit_; }

 private:
  // Per-call match data (PCRE2 match data is not shareable between threads).
  class MatchState {
   public:
    explicit MatchState(const Regex& re);
    ~MatchState();
    MatchState(const MatchState&) = delete;
    MatchState& operator=(const MatchState&) = delete;
    // Finds the next match at or after `pos`; false when there is none.
    bool Next(std::string_view text, size_t pos, size_t* start, size_t* end);

   private:
    const Regex& re_;
    void* match_data_;
  };

  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so users need not include pcre2.h.
  bool jit_ = false;
};

}  // namespace crossword::tokenizer
