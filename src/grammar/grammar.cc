// Grammar builders, and code point ranges spelled as UTF-8 byte-range sequences.
#include "grammar/grammar.h"

#include <algorithm>

namespace crossword::grammar {
namespace {

// One UTF-8 byte-range sequence: byte i of an encoding lies in [lo[i], hi[i]].
struct Utf8Seq {
  int n = 0;
  std::array<uint8_t, 4> lo{}, hi{};
};

int EncodeUtf8(char32_t cp, uint8_t* out) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

// Splits [a, b] (both encoded with the same number of bytes) into sequences of byte ranges: the
// range is cut until, for every continuation byte, it covers either one value or all 64, which
// makes the set of encodings a product of per-byte ranges (the construction RE2 and Rust's
// utf8-ranges use). Depth is bounded by the 3 continuation-byte levels.
void SplitSameLength(char32_t a, char32_t b, std::vector<Utf8Seq>& out) {
  for (int i = 1; i < 4; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((a & ~m) != (b & ~m)) {
      if ((a & m) != 0) {
        SplitSameLength(a, a | m, out);
        SplitSameLength((a | m) + 1, b, out);
        return;
      }
      if ((b & m) != m) {
        SplitSameLength(a, (b & ~m) - 1, out);
        SplitSameLength(b & ~m, b, out);
        return;
      }
    }
  }
  Utf8Seq s;
  uint8_t ea[4], eb[4];
  s.n = EncodeUtf8(a, ea);
  EncodeUtf8(b, eb);
  for (int i = 0; i < s.n; ++i) {
    s.lo[i] = ea[i];
    s.hi[i] = eb[i];
  }
  out.push_back(s);
}

void SplitRange(char32_t a, char32_t b, std::vector<Utf8Seq>& out) {
  static constexpr char32_t kLast[4] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  char32_t first = 0;
  for (char32_t last : kLast) {
    const char32_t lo = std::max(a, first), hi = std::min(b, last);
    if (lo <= hi) SplitSameLength(lo, hi, out);
    first = last + 1;
  }
}

}  // namespace

uint32_t Grammar::AddNode(Node node) {
  nodes.push_back(std::move(node));
  return static_cast<uint32_t>(nodes.size() - 1);
}

uint32_t Grammar::Bytes(const ByteSet& set) {
  Node n;
  n.kind = NodeKind::kBytes;
  n.bytes = set;
  return AddNode(std::move(n));
}

uint32_t Grammar::Byte(uint8_t b) {
  ByteSet s;
  s.Set(b);
  return Bytes(s);
}

uint32_t Grammar::Literal(std::string_view bytes) {
  std::vector<uint32_t> kids;
  kids.reserve(bytes.size());
  for (char c : bytes) kids.push_back(Byte(static_cast<uint8_t>(c)));
  return kids.size() == 1 ? kids[0] : Seq(std::move(kids));
}

uint32_t Grammar::Ref(uint32_t rule) {
  Node n;
  n.kind = NodeKind::kRef;
  n.rule = rule;
  return AddNode(std::move(n));
}

uint32_t Grammar::Seq(std::vector<uint32_t> kids) {
  Node n;
  n.kind = NodeKind::kSeq;
  n.kids = std::move(kids);
  return AddNode(std::move(n));
}

uint32_t Grammar::Alt(std::vector<uint32_t> kids) {
  Node n;
  n.kind = NodeKind::kAlt;
  n.kids = std::move(kids);
  return AddNode(std::move(n));
}

uint32_t Grammar::Repeat(uint32_t kid, uint32_t min, uint32_t max) {
  Node n;
  n.kind = NodeKind::kRepeat;
  n.kids = {kid};
  n.min = min;
  n.max = max;
  return AddNode(std::move(n));
}

uint32_t Grammar::Codepoints(std::vector<std::pair<char32_t, char32_t>> ranges, bool negate) {
  // Normalize: clamp, sort, merge, then complement if asked, then drop the surrogates.
  std::vector<std::pair<char32_t, char32_t>> r;
  for (auto [a, b] : ranges) {
    if (a > b || a > 0x10FFFF) continue;
    r.emplace_back(a, std::min<char32_t>(b, 0x10FFFF));
  }
  std::sort(r.begin(), r.end());
  std::vector<std::pair<char32_t, char32_t>> merged;
  for (auto [a, b] : r) {
    if (!merged.empty() && a <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, b);
    } else {
      merged.emplace_back(a, b);
    }
  }
  if (negate) {
    std::vector<std::pair<char32_t, char32_t>> inv;
    char32_t next = 0;
    for (auto [a, b] : merged) {
      if (a > next) inv.emplace_back(next, a - 1);
      next = b + 1;
    }
    if (next <= 0x10FFFF) inv.emplace_back(next, 0x10FFFF);
    merged = std::move(inv);
  }
  std::vector<Utf8Seq> seqs;
  for (auto [a, b] : merged) {
    if (a < 0xD800 && b >= 0xD800) {
      if (a <= 0xD7FF) SplitRange(a, 0xD7FF, seqs);
      if (b >= 0xE000) SplitRange(0xE000, b, seqs);
    } else if (a >= 0xD800 && a <= 0xDFFF) {
      if (b >= 0xE000) SplitRange(0xE000, b, seqs);
    } else {
      SplitRange(a, b, seqs);
    }
  }
  // ASCII ranges share one byte set; every longer sequence is its own alternative.
  ByteSet ascii;
  std::vector<uint32_t> alts;
  for (const Utf8Seq& s : seqs) {
    if (s.n == 1) {
      ascii.SetRange(s.lo[0], s.hi[0]);
      continue;
    }
    std::vector<uint32_t> kids;
    for (int i = 0; i < s.n; ++i) {
      ByteSet b;
      b.SetRange(s.lo[i], s.hi[i]);
      kids.push_back(Bytes(b));
    }
    alts.push_back(Seq(std::move(kids)));
  }
  if (!ascii.Empty() || alts.empty()) alts.insert(alts.begin(), Bytes(ascii));
  return alts.size() == 1 ? alts[0] : Alt(std::move(alts));
}

uint32_t Grammar::RuleId(std::string_view name) {
  auto [it, added] = rule_index.try_emplace(std::string(name), static_cast<uint32_t>(rules.size()));
  if (added) {
    Rule r;
    r.name = std::string(name);
    rules.push_back(std::move(r));
  }
  return it->second;
}

}  // namespace crossword::grammar
