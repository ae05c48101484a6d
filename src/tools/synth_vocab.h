// Byte-level BPE vocabulary for synthesized models: 256 byte tokens (GPT-2 byte-to-unicode
// mapping), merges learned on a small embedded English/code corpus, then (for large vocabularies)
// extra merges that join existing word pieces, the Qwen3.5 special tokens and a mask token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace crossword::tools {

/// llama.cpp token types as stored in tokenizer.ggml.token_type.
enum TokenType : int32_t {
  kTokenNormal = 1,
  kTokenControl = 3,
  kTokenUserDefined = 4,
  kTokenUnused = 5,
};

/// A complete vocabulary, ids = positions.
struct SynthVocab {
  std::vector<std::string> tokens;  ///< byte-level strings ("Ġthe"), specials verbatim
  std::vector<int32_t> types;       ///< TokenType per token
  std::vector<std::string> merges;  ///< "left right", rank = position
  int32_t endoftext_id = -1;        ///< <|endoftext|> (padding and bos in Qwen files)
  int32_t im_start_id = -1;
  int32_t im_end_id = -1;  ///< end of a turn: the eos id
  int32_t mask_id = -1;    ///< <|mask|>, the diffusion mask token
};

/// Where special tokens go.
struct VocabShape {
  /// Number of BPE tokens (bytes + merges) before the first special token. For the real
  /// Clover vocabulary this is 248,044, which puts <|endoftext|> at 248044 as in Qwen3.5.
  int64_t n_bpe = 0;
  /// Total size (embedding rows); ids after the specials and the mask are "[PADn]" unused tokens.
  int64_t n_total = 0;
};

/// Builds the vocabulary deterministically from `seed`. The 26 Qwen3.5 special tokens follow the
/// BPE tokens in their Qwen order (<|endoftext|>, <|im_start|>, <|im_end|>, ..., <think>,
/// </think>), then <|mask|>, then padding. Throws crossword::Error if n_bpe < 256 + 64 or n_total
/// is too small to hold the specials.
SynthVocab BuildSynthVocab(const VocabShape& shape, uint64_t seed);

/// GPT-2 byte-level encoding of raw bytes ("Ġ" for a space, "Ċ" for a newline, ...).
std::string ByteLevelEncode(std::string_view bytes);

}  // namespace crossword::tools
