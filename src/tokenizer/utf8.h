// UTF-8 helpers for the tokenizer: strict decoding with maximal-subpart error lengths (the
// convention Rust's String::from_utf8_lossy and the Unicode standard use), encoding, and the
// GPT-2 byte <-> unicode map used by byte-level BPE vocabularies.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/utf8.h"

namespace crossword::tokenizer {

/// Result of decoding one UTF-8 sequence at the start of a byte range.
struct Utf8Step {
  char32_t cp = 0;  ///< The code point (valid only when `status == kValid`).
  int length = 0;   ///< Bytes consumed: the sequence, the maximal invalid subpart, or the prefix.
  enum Status : uint8_t {
    kValid,       ///< A complete, well-formed sequence (no overlongs, surrogates, > U+10FFFF).
    kInvalid,     ///< `length` bytes (1..3) form one maximal ill-formed subpart: one U+FFFD.
    kIncomplete,  ///< The range ends inside a well-formed prefix of `length` bytes.
  } status = kValid;
};

/// Decodes the sequence starting at `p` (with `n >= 1` bytes available). Never reads past `n`.
Utf8Step DecodeUtf8(const char* p, size_t n);

/// Appends the UTF-8 encoding of `cp` (must be <= U+10FFFF and not a surrogate).
using crossword::AppendUtf8;

/// Appends `bytes` to `out`, replacing each maximal ill-formed subpart (and a trailing
/// incomplete sequence) by U+FFFD: the same output as Rust's String::from_utf8_lossy.
void AppendUtf8Lossy(std::string_view bytes, std::string& out);

/// True when `bytes` is well-formed UTF-8.
bool IsValidUtf8(std::string_view bytes);

/// The GPT-2 byte-level alphabet: each byte maps to one printable code point (printable
/// Latin-1 bytes map to themselves, the other 68 to U+0100 + k in byte order), as published with
/// GPT-2's encoder and used by every byte-level BPE tokenizer.json and GGUF `gpt2` vocabulary.
struct ByteLevelAlphabet {
  std::array<char32_t, 256> byte_to_cp{};
  /// Inverse map for code points below 0x144 (the alphabet's range); -1 when not in the alphabet.
  std::array<int16_t, 0x144> cp_to_byte{};
};

/// Returns the (constant) byte-level alphabet.
const ByteLevelAlphabet& ByteLevel();

/// Maps raw bytes to the byte-level text form ("Ġthe" for " the").
std::string BytesToByteLevel(std::string_view bytes);

/// Maps byte-level text back to raw bytes. Returns false (and leaves `out` partially filled)
/// when `text` contains a character outside the alphabet or invalid UTF-8.
bool ByteLevelToBytes(std::string_view text, std::string& out);

}  // namespace crossword::tokenizer
