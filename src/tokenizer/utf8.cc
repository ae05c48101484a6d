// UTF-8 decoding/encoding and the GPT-2 byte-level alphabet (see utf8.h).
#include "tokenizer/utf8.h"

namespace crossword::tokenizer {
namespace {

bool IsCont(uint8_t b) { return (b & 0xC0) == 0x80; }

ByteLevelAlphabet MakeByteLevel() {
  ByteLevelAlphabet a;
  a.cp_to_byte.fill(-1);
  // Printable bytes keep their code point; the rest are shifted to U+0100.. in byte order.
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(0x100 + next++);
    a.byte_to_cp[b] = cp;
    a.cp_to_byte[cp] = static_cast<int16_t>(b);
  }
  return a;
}

}  // namespace

Utf8Step DecodeUtf8(const char* p, size_t n) {
  const auto* s = reinterpret_cast<const uint8_t*>(p);
  uint8_t b0 = s[0];
  if (b0 < 0x80) return {b0, 1, Utf8Step::kValid};
  int len;
  uint8_t lo = 0x80, hi = 0xBF;  // Allowed range of the second byte (Unicode table 3-7).
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0, 1, Utf8Step::kInvalid};
  }
  char32_t cp = b0 & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (int i = 1; i < len; ++i) {
    if (static_cast<size_t>(i) >= n) return {0, i, Utf8Step::kIncomplete};
    uint8_t b = s[i];
    bool ok = i == 1 ? (b >= lo && b <= hi) : IsCont(b);
    if (!ok) return {0, i, Utf8Step::kInvalid};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, len, Utf8Step::kValid};
}

void AppendUtf8Lossy(std::string_view bytes, std::string& out) {
  size_t i = 0;
  while (i < bytes.size()) {
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      out.push_back(bytes[i++]);
      continue;
    }
    Utf8Step st = DecodeUtf8(bytes.data() + i, bytes.size() - i);
    if (st.status == Utf8Step::kValid) {
      out.append(bytes.data() + i, st.length);
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += st.length;
  }
}

bool IsValidUtf8(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    Utf8Step st = DecodeUtf8(bytes.data() + i, bytes.size() - i);
    if (st.status != Utf8Step::kValid) return false;
    i += st.length;
  }
  return true;
}

const ByteLevelAlphabet& ByteLevel() {
  static const ByteLevelAlphabet kAlphabet = MakeByteLevel();  // Immutable after first use.
  return kAlphabet;
}

std::string BytesToByteLevel(std::string_view bytes) {
  const ByteLevelAlphabet& a = ByteLevel();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(a.byte_to_cp[static_cast<uint8_t>(c)], out);
  return out;
}

bool ByteLevelToBytes(std::string_view text, std::string& out) {
  const ByteLevelAlphabet& a = ByteLevel();
  size_t i = 0;
  while (i < text.size()) {
    Utf8Step st = DecodeUtf8(text.data() + i, text.size() - i);
    if (st.status != Utf8Step::kValid || st.cp >= a.cp_to_byte.size() || a.cp_to_byte[st.cp] < 0) {
      return false;
    }
    out.push_back(static_cast<char>(a.cp_to_byte[st.cp]));
    i += st.length;
  }
  return true;
}

}  // namespace crossword::tokenizer
