// NFC normalization: canonical decomposition, canonical ordering, canonical composition
// (UAX #15, with the sample composition loop of its section "Implementation notes").
#include "tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tokenizer/utf8.h"

namespace crossword::tokenizer {
namespace {

struct CccRange {
  char32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp;
  uint16_t offset;
  uint8_t length;
};
struct Composition {
  char32_t first, second, composite;
};
struct UnstableRange {
  char32_t first, last;
};

#include "tokenizer/nfc_tables.inc"

// Hangul syllables are composed/decomposed arithmetically (Unicode chapter 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr char32_t kSCount = kLCount * kNCount;
// Ill-formed input bytes travel through the buffer as kRawByte + byte: starters that never
// compose, written back unchanged.
constexpr char32_t kRawByte = 0x200000;

uint8_t Ccc(char32_t cp) {
  if (cp < 0x300 || cp >= kRawByte) return 0;
  auto it = std::upper_bound(std::begin(kCccRanges), std::end(kCccRanges), cp,
                             [](char32_t c, const CccRange& r) { return c < r.first; });
  if (it == std::begin(kCccRanges)) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

bool Unstable(char32_t cp) {
  auto it = std::upper_bound(std::begin(kUnstableRanges), std::end(kUnstableRanges), cp,
                             [](char32_t c, const UnstableRange& r) { return c < r.first; });
  if (it == std::begin(kUnstableRanges)) return false;
  --it;
  return cp <= it->last;
}

void Decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0) {
    auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                               [](const Decomposition& d, char32_t c) { return d.cp < c; });
    if (it != std::end(kDecompositions) && it->cp == cp) {
      out.insert(out.end(), kDecompositionPool + it->offset,
                 kDecompositionPool + it->offset + it->length);
      return;
    }
  }
  out.push_back(cp);
}

// Returns the primary composite of (a, b), or 0 when there is none.
char32_t Compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  auto it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions), std::pair(a, b),
                             [](const Composition& c, const std::pair<char32_t, char32_t>& k) {
                               return c.first != k.first ? c.first < k.first : c.second < k.second;
                             });
  if (it != std::end(kCompositions) && it->first == a && it->second == b) return it->composite;
  return 0;
}

}  // namespace

bool IsNfcQuick(std::string_view text) {
  // Code points below U+0300 (lead bytes < 0xCC) are stable starters.
  size_t i = 0;
  while (i < text.size() && static_cast<uint8_t>(text[i]) < 0xCC) ++i;
  if (i == text.size()) return true;
  uint8_t last_ccc = 0;
  i = 0;
  while (i < text.size()) {
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      last_ccc = 0;
      ++i;
      continue;
    }
    Utf8Step st = DecodeUtf8(text.data() + i, text.size() - i);
    i += st.length;
    if (st.status != Utf8Step::kValid) {
      last_ccc = 0;
      continue;
    }
    if (st.cp < 0x300) {
      last_ccc = 0;
      continue;
    }
    if (Unstable(st.cp)) return false;
    uint8_t ccc = Ccc(st.cp);
    if (ccc != 0 && last_ccc > ccc) return false;
    last_ccc = ccc;
  }
  return true;
}

void AppendNfc(std::string_view text, std::string& out) {
  if (IsNfcQuick(text)) {
    out.append(text);
    return;
  }
  std::vector<char32_t> buf;
  buf.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    Utf8Step st = DecodeUtf8(text.data() + i, text.size() - i);
    if (st.status == Utf8Step::kValid) {
      Decompose(st.cp, buf);
    } else {
      for (int k = 0; k < st.length; ++k)
        buf.push_back(kRawByte + static_cast<uint8_t>(text[i + k]));
    }
    i += st.length;
  }
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t a = 0; a < buf.size();) {
    if (Ccc(buf[a]) == 0) {
      ++a;
      continue;
    }
    size_t b = a;
    while (b < buf.size() && Ccc(buf[b]) != 0) ++b;
    std::stable_sort(buf.begin() + a, buf.begin() + b,
                     [](char32_t x, char32_t y) { return Ccc(x) < Ccc(y); });
    a = b;
  }
  // Canonical composition.
  if (!buf.empty()) {
    size_t starter = 0, write = 1;
    int last_class = Ccc(buf[0]) == 0 ? 0 : 256;  // A leading mark has no starter to join.
    for (size_t r = 1; r < buf.size(); ++r) {
      char32_t ch = buf[r];
      int ch_class = Ccc(ch);
      char32_t composite = Compose(buf[starter], ch);
      if (composite != 0 && (last_class < ch_class || last_class == 0)) {
        buf[starter] = composite;
        continue;
      }
      if (ch_class == 0) starter = write;
      last_class = ch_class;
      buf[write++] = ch;
    }
    buf.resize(write);
  }
  for (char32_t cp : buf) {
    if (cp >= kRawByte) {
      out.push_back(static_cast<char>(cp - kRawByte));
    } else {
      AppendUtf8(cp, out);
    }
  }
}

const char* NfcUnicodeVersion() { return kUnicodeVersion; }

}  // namespace crossword::tokenizer
