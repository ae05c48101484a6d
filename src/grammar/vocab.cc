// TokenVocabulary: token bytes, excluded and EOS ids, and the byte trie in preorder.
#include <algorithm>
#include <array>

#include "grammar/matcher.h"

namespace crossword::grammar {
// States: 0 = at a character boundary, 1..3 = that many continuation bytes (80..BF) still
// needed, 4..7 = the restricted second byte after E0 (A0..BF), ED (80..9F), F0 (90..BF),
// F4 (80..8F).
uint8_t Utf8Step(uint8_t state, uint8_t b) {
  const bool cont = b >= 0x80 && b <= 0xBF;
  switch (state) {
    case 0:
      if (b < 0x80) return 0;
      if (b >= 0xC2 && b <= 0xDF) return 1;
      if (b == 0xE0) return 4;
      if (b == 0xED) return 5;
      if (b >= 0xE1 && b <= 0xEF) return 2;
      if (b == 0xF0) return 6;
      if (b >= 0xF1 && b <= 0xF3) return 3;
      if (b == 0xF4) return 7;
      return kUtf8Bad;
    case 1:
    case 2:
    case 3:
      return cont ? static_cast<uint8_t>(state - 1) : kUtf8Bad;
    case 4:
      return b >= 0xA0 && b <= 0xBF ? 1 : kUtf8Bad;
    case 5:
      return b >= 0x80 && b <= 0x9F ? 1 : kUtf8Bad;
    case 6:
      return b >= 0x90 && b <= 0xBF ? 2 : kUtf8Bad;
    case 7:
      return b >= 0x80 && b <= 0x8F ? 2 : kUtf8Bad;
    default:
      return kUtf8Bad;
  }
}

TokenVocabulary::TokenVocabulary(std::vector<std::string> tokens, std::span<const int32_t> excluded,
                                 std::span<const int32_t> eos)
    : tokens_(std::move(tokens)), eos_(eos.begin(), eos.end()) {
  const auto n = static_cast<int32_t>(tokens_.size());
  std::vector<uint8_t> in_trie(tokens_.size(), 1);
  for (int32_t id : excluded) {
    Check(id >= 0 && id < n, "grammar vocabulary: excluded token id {} is outside [0, {})", id, n);
    in_trie[id] = 0;
  }
  for (int32_t id : eos_) {
    Check(id >= 0 && id < n, "grammar vocabulary: EOS token id {} is outside [0, {})", id, n);
    in_trie[id] = 0;
  }
  std::sort(eos_.begin(), eos_.end());
  std::vector<int32_t> order;
  order.reserve(tokens_.size());
  for (int32_t id = 0; id < n; ++id) {
    const size_t len = tokens_[id].size();
    if (in_trie[id] && len > 0 && len <= UINT16_MAX) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return tokens_[a] < tokens_[b] || (tokens_[a] == tokens_[b] && a < b);
  });
  trie_tokens_.assign(mask_words(), 0);
  // Sorted strings give the trie in preorder: each string adds the nodes past its common prefix
  // with the previous one; a node's subtree ends when a later string leaves its path.
  std::vector<TrieNode>& nodes = trie_.nodes;
  std::vector<uint32_t> path;
  std::vector<std::pair<uint32_t, int32_t>> node_tok;
  std::string_view prev;
  // Closing the deepest open node: its subtree is complete; fold it into its parent's summary.
  auto close = [&] {
    const uint32_t x = path.back();
    path.pop_back();
    nodes[x].end = static_cast<uint32_t>(nodes.size());
    if (!path.empty()) {
      TrieNode& parent = nodes[path.back()];
      parent.below |= nodes[x].below | (uint64_t{1} << ByteGroup(nodes[x].byte));
      parent.height = std::max<uint16_t>(parent.height, static_cast<uint16_t>(nodes[x].height + 1));
      const bool child_ok = (nodes[x].utf8 & 15) != kUtf8Bad && (nodes[x].utf8 & kUtf8Below);
      if (!child_ok) parent.utf8 &= static_cast<uint8_t>(~kUtf8Below);
    }
  };
  for (int32_t id : order) {
    const std::string_view s = tokens_[id];
    MaskSet(trie_tokens_, id);
    size_t lcp = 0;
    while (lcp < prev.size() && lcp < s.size() && prev[lcp] == s[lcp]) ++lcp;
    while (path.size() > lcp) close();
    for (size_t d = lcp; d < s.size(); ++d) {
      path.push_back(static_cast<uint32_t>(nodes.size()));
      TrieNode node;
      node.byte = static_cast<uint8_t>(s[d]);
      node.depth = static_cast<uint16_t>(d + 1);
      const uint8_t before = d == 0 ? 0 : nodes[path[path.size() - 2]].utf8 & 15;
      const uint8_t after = Utf8Step(before, node.byte);
      node.utf8 = static_cast<uint8_t>(after | kUtf8Below | (after == 0 ? kUtf8Boundary : 0));
      nodes.push_back(node);
    }
    node_tok.emplace_back(path.back(), id);
    prev = s;
  }
  while (!path.empty()) close();
  nodes.emplace_back();  // sentinel
  // Tokens by node (they arrive in node order already).
  std::vector<uint32_t> count(nodes.size(), 0);
  for (auto [node, id] : node_tok) ++count[node];
  uint32_t acc = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    nodes[i].tok_begin = acc;
    acc += count[i];
  }
  trie_.node_tokens.reserve(node_tok.size());
  for (auto [node, id] : node_tok) trie_.node_tokens.push_back(id);
}

int ByteGroup(uint8_t b) {
  static const std::array<uint8_t, 256> kGroup = [] {
    std::array<uint8_t, 256> g{};
    for (int c = 0; c < 256; ++c) {
      uint8_t v;
      if (c == '\t') {
        v = 1;
      } else if (c == '\n') {
        v = 2;
      } else if (c == '\r') {
        v = 3;
      } else if (c == ' ') {
        v = 4;
      } else if (c < 0x20 || c == 0x7F) {
        v = 0;
      } else if (c >= '0' && c <= '9') {
        v = 37;
      } else if (c >= 'A' && c <= 'F') {
        v = 38;
      } else if (c >= 'G' && c <= 'Z') {
        v = 39;
      } else if (c >= 'a' && c <= 'f') {
        v = 40;
      } else if (c >= 'g' && c <= 'z') {
        v = 41;
      } else if (c < 0x80) {  // the 32 punctuation characters, in order
        static const std::string kPunct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
        v = static_cast<uint8_t>(5 + kPunct.find(static_cast<char>(c)));
      } else if (c < 0xC0) {
        v = 42;
      } else if (c < 0xE0) {
        v = 43;
      } else if (c < 0xF0) {
        v = 44;
      } else {
        v = 45;
      }
      g[c] = v;
    }
    return g;
  }();
  return kGroup[b];
}

uint64_t ByteGroupMask(const ByteSet& set) {
  uint64_t any = 0, missing = 0;
  for (unsigned b = 0; b < 256; ++b) {
    const uint64_t bit = uint64_t{1} << ByteGroup(static_cast<uint8_t>(b));
    (set.Has(static_cast<uint8_t>(b)) ? any : missing) |= bit;
  }
  return any & ~missing;
}

bool TokenVocabulary::IsEos(int32_t id) const {
  return std::binary_search(eos_.begin(), eos_.end(), id);
}

}  // namespace crossword::grammar
