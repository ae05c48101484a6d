// UTF-8 encoding and strict decoding of one code point, shared by the tokenizer, the template
// engine and the tool-call parser.
#pragma once

#include <string>
#include <string_view>

namespace crossword {

/// Appends the UTF-8 form of `cp` (1 to 4 bytes) to `out`. The caller passes a code point
/// <= U+10FFFF; surrogates are encoded as they are (3 bytes), as Python's surrogatepass does.
inline void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

/// Decodes the strict UTF-8 sequence starting at byte `i` of `s` (i < s.size()). Returns its
/// length in bytes (1 to 4) and sets `cp`, or returns 0 when the bytes there are not valid UTF-8:
/// a bad lead or continuation byte, a sequence cut by the end of `s`, an overlong form, a
/// surrogate or a value past U+10FFFF, the same cases Python's strict decoder rejects.
inline int DecodeUtf8At(std::string_view s, size_t i, char32_t& cp) {
  const auto b = static_cast<unsigned char>(s[i]);
  const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (len == 0 || i + len > s.size()) return 0;
  char32_t v = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < len; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return 0;
    v = (v << 6) | (c & 0x3F);
  }
  if ((len == 2 && v < 0x80) || (len == 3 && v < 0x800) || (len == 4 && v < 0x10000) ||
      (v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF) {
    return 0;
  }
  cp = v;
  return len;
}

}  // namespace crossword
