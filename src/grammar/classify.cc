// CompiledGrammar: per-state token classes by one walk of the vocabulary trie (xgrammar's
// adaptive token mask cache, computed lazily per state).
#include <algorithm>
#include <unordered_map>

#include "grammar/matcher.h"

namespace crossword::grammar {
namespace {

// A stack of the walk: the base level is the frame being classified (its caller is unknown);
// frames pushed above it live in a pool. A configuration with the high bit set is a base-level
// frame in state (cfg & ~kBase); otherwise it indexes the pool.
constexpr uint32_t kBase = 0x80000000u;
constexpr uint32_t kNone = 0xFFFFFFFFu;

class Walker {
 public:
  explicit Walker(const Pda& p) : p_(p) {}

  uint32_t Make(uint32_t state, uint32_t parent) {
    if (parent == kNone) return kBase | state;
    const uint64_t key = (uint64_t{state} << 32) | parent;
    auto [it, added] = index_.try_emplace(key, static_cast<uint32_t>(pool_.size()));
    if (added) pool_.push_back({state, parent});
    return it->second;
  }
  void Decode(uint32_t cfg, uint32_t& state, uint32_t& parent) const {
    if (cfg & kBase) {
      state = cfg & ~kBase;
      parent = kNone;
    } else {
      state = pool_[cfg].first;
      parent = pool_[cfg].second;
    }
  }

  // Adds the configurations reachable from `cfg` without consuming a byte (calls entered,
  // completed frames popped) that can consume a byte to `out` (from `out_begin` on, deduped);
  // sets `exited` when the base frame completes.
  void Close(uint32_t cfg, std::vector<uint32_t>& out, size_t out_begin, bool& exited) {
    work_.assign(1, cfg);
    seen_.clear();
    while (!work_.empty()) {
      const uint32_t c = work_.back();
      work_.pop_back();
      if (std::find(seen_.begin(), seen_.end(), c) != seen_.end()) continue;
      seen_.push_back(c);
      uint32_t s, par;
      Decode(c, s, par);
      if (p_.HasBytes(s) &&
          std::find(out.begin() + static_cast<ptrdiff_t>(out_begin), out.end(), c) == out.end()) {
        out.push_back(c);
      }
      for (uint32_t k = p_.call_begin[s]; k < p_.call_begin[s + 1]; ++k) {
        const Pda::Call& call = p_.calls[k];
        work_.push_back(call.tail ? Make(call.start, par) : Make(call.start, Make(call.ret, par)));
      }
      if (p_.Final(s)) {
        if (par == kNone) {
          exited = true;
        } else {
          work_.push_back(par);
        }
      }
    }
  }

 private:
  const Pda& p_;
  std::vector<std::pair<uint32_t, uint32_t>> pool_;
  std::unordered_map<uint64_t, uint32_t> index_;
  std::vector<uint32_t> work_, seen_;
};

}  // namespace

CompiledGrammar::CompiledGrammar(Pda pda, std::shared_ptr<const TokenVocabulary> vocab)
    : pda_(std::move(pda)), vocab_(std::move(vocab)) {
  class_bytes_.resize(pda_.n_classes);
  for (unsigned b = 0; b < 256; ++b)
    class_bytes_[pda_.byte_class[b]].push_back(static_cast<uint8_t>(b));
  classes_.resize(pda_.n_states);
  simple_.resize(pda_.n_states);
  // Rules that are never called: their frames sit on the empty stack.
  root_only_.assign(pda_.rule_names.size(), 1);
  for (const Pda::Call& c : pda_.calls) root_only_[pda_.state_rule[c.start]] = 0;
  for (uint32_t s = 0; s < pda_.n_states; ++s) {
    simple_[s] = pda_.flags[s] == Pda::kHasBytes && pda_.call_begin[s] == pda_.call_begin[s + 1];
  }
  // Uniform steps: for each state, the simple successor most bytes lead to (`ustep_`, by the
  // bytes `uset_`), and how many such steps in a row keep the same bytes valid (`chain_`:
  // 65535 for a self-loop, such as inside a string). A trie subtree using only those bytes and
  // no deeper than that is accepted whole.
  const uint32_t n = pda_.n_states;
  ustep_.assign(n, -1);
  uset_.assign(n, ByteSet{});
  ugroups_.assign(n, 0);
  chain_.assign(n, 0);
  {
    std::vector<uint32_t> weight(n, 0);
    for (uint32_t s = 0; s < n; ++s) {
      int32_t best = -1;
      for (uint32_t c = 0; c < pda_.n_classes; ++c) {
        const int32_t u = pda_.next[static_cast<size_t>(s) * pda_.n_classes + c];
        if (u < 0 || !simple_[u]) continue;
        weight[u] += static_cast<uint32_t>(class_bytes_[c].size());
        if (best < 0 || weight[u] > weight[best]) best = u;
      }
      for (uint32_t c = 0; c < pda_.n_classes; ++c) {
        const int32_t u = pda_.next[static_cast<size_t>(s) * pda_.n_classes + c];
        if (u >= 0) weight[u] = 0;
        if (u >= 0 && u == best) {
          for (uint8_t b : class_bytes_[c]) uset_[s].Set(b);
        }
      }
      ustep_[s] = best;
      ugroups_[s] = ByteGroupMask(uset_[s]);
    }
    std::vector<uint8_t> mark(n, 0);  // 0 new, 1 on the current chain, 2 done
    std::vector<uint32_t> path;
    for (uint32_t s0 = 0; s0 < n; ++s0) {
      path.clear();
      int32_t cur = static_cast<int32_t>(s0);
      while (cur >= 0 && mark[cur] == 0) {
        mark[cur] = 1;
        path.push_back(static_cast<uint32_t>(cur));
        if (ustep_[cur] == cur) break;
        cur = ustep_[cur];
      }
      for (size_t j = path.size(); j-- > 0;) {
        const uint32_t t = path[j];
        const int32_t u = ustep_[t];
        if (u < 0) {
          chain_[t] = 0;
        } else if (u == static_cast<int32_t>(t)) {
          chain_[t] = UINT16_MAX;
        } else {
          const ByteSet& a = uset_[t];
          const ByteSet& b = uset_[u];
          const bool subset = ((a.w[0] & ~b.w[0]) | (a.w[1] & ~b.w[1]) | (a.w[2] & ~b.w[2]) |
                               (a.w[3] & ~b.w[3])) == 0;
          const uint32_t after = mark[u] == 2 ? chain_[u] : 0;  // 0 inside a longer cycle
          chain_[t] = static_cast<uint16_t>(subset ? std::min<uint32_t>(UINT16_MAX, after + 1) : 1);
        }
        mark[t] = 2;
      }
    }
  }
  // States where every valid UTF-8 character leads back (through plain states) to the same
  // state, as inside a JSON string: with an ASCII self-loop, a subtree at a character boundary
  // whose paths stay valid UTF-8 and whose ASCII bytes loop is accepted whole.
  utf8_loop_.assign(n, 0);
  for (uint32_t t = 0; t < n; ++t) {
    if (ustep_[t] != static_cast<int32_t>(t)) continue;
    std::vector<std::pair<uint32_t, uint8_t>> work, seen;
    bool ok = true;
    for (unsigned b = 0xC2; b <= 0xF4 && ok; ++b) {
      const int32_t s1 = pda_.Next(t, static_cast<uint8_t>(b));
      if (s1 < 0 || !simple_[s1])
        ok = false;
      else
        work.emplace_back(static_cast<uint32_t>(s1), Utf8Step(0, static_cast<uint8_t>(b)));
    }
    while (ok && !work.empty()) {
      const auto item = work.back();
      work.pop_back();
      if (std::find(seen.begin(), seen.end(), item) != seen.end()) continue;
      seen.push_back(item);
      for (unsigned c = 0x80; c <= 0xBF && ok; ++c) {
        const uint8_t u2 = Utf8Step(item.second, static_cast<uint8_t>(c));
        if (u2 == kUtf8Bad) continue;
        const int32_t s2 = pda_.Next(item.first, static_cast<uint8_t>(c));
        if (s2 < 0) {
          ok = false;
        } else if (u2 == 0) {
          ok = s2 == static_cast<int32_t>(t);
        } else if (!simple_[s2]) {
          ok = false;
        } else {
          work.emplace_back(static_cast<uint32_t>(s2), u2);
        }
      }
    }
    utf8_loop_[t] = ok;
  }
}

const TokenClasses& CompiledGrammar::Classes(uint32_t s) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (classes_[s]) return *classes_[s];
  }
  // Computed outside the lock (a walk may take a millisecond); a concurrent duplicate is dropped.
  auto computed = std::make_unique<const TokenClasses>(Classify(s));
  std::lock_guard<std::mutex> lock(mu_);
  if (!classes_[s]) classes_[s] = std::move(computed);
  return *classes_[s];
}

void CompiledGrammar::PrecomputeAll() const {
  for (uint32_t s = 0; s < pda_.n_states; ++s) {
    if (pda_.HasBytes(s)) Classes(s);
  }
}

namespace {

// The state of one classification walk: accepted tokens, uncertain (token, exit depth) pairs and
// the depths at which the base frame completed along the current trie path.
struct WalkResult {
  std::vector<uint64_t> accepted;
  size_t n_accepted = 0;
  std::vector<std::pair<int32_t, uint16_t>> uncertain;
  std::vector<uint16_t> exits;

  void Accept(int32_t id) {
    MaskSet(accepted, id);
    ++n_accepted;
  }
  // Tokens of trie nodes [first, last) that no live configuration reaches: uncertain at every
  // exit depth on the path (nothing if the frame never completed).
  void Uncertain(const TokenVocabulary::Trie& trie, size_t first, size_t last) {
    if (exits.empty()) return;
    for (uint32_t k = trie.nodes[first].tok_begin; k < trie.nodes[last].tok_begin; ++k) {
      for (uint16_t e : exits) uncertain.emplace_back(trie.node_tokens[k], e);
    }
  }
};

// The general walk of the subtree at trie node `i0` (depth d0), entered with configuration
// `start` (already one byte into the subtree): any mix of base-level states and pushed frames.
void WalkSubtree(const Pda& p, const std::vector<uint8_t>& simple,
                 const TokenVocabulary::Trie& trie, size_t i0, uint32_t d0, uint32_t start,
                 WalkResult& r) {
  Walker w(p);
  const size_t exits_below = r.exits.size();  // the caller's exits stay
  // Level d (relative to d0 - 1) holds cfgs[level[d] .. level[d + 1]).
  std::vector<uint32_t> cfgs;
  std::vector<size_t> level{0, 0};
  bool exited = false;
  w.Close(start, cfgs, 0, exited);
  level.push_back(cfgs.size());
  auto tokens_at = [&](size_t i, bool ok) {
    for (uint32_t k = trie.nodes[i].tok_begin; k < trie.nodes[i + 1].tok_begin; ++k) {
      const int32_t id = trie.node_tokens[k];
      if (ok) {
        r.Accept(id);
      } else {
        for (uint16_t e : r.exits) r.uncertain.emplace_back(id, e);
      }
    }
  };
  bool live = cfgs.size() > 0;
  tokens_at(i0, live || exited);
  if (exited) r.exits.push_back(static_cast<uint16_t>(d0));
  const size_t last = trie.nodes[i0].end;
  if (!live) {
    r.Uncertain(trie, i0 + 1, last);
    r.exits.resize(exits_below);
    return;
  }
  for (size_t i = i0 + 1; i < last;) {
    const TokenVocabulary::TrieNode& node = trie.nodes[i];
    const uint32_t d = node.depth - d0 + 1;  // relative depth, >= 2
    const uint8_t b = node.byte;
    while (r.exits.size() > exits_below && r.exits.back() >= node.depth) r.exits.pop_back();
    const size_t pb = level[d - 1], pe = level[d];
    cfgs.resize(pe);
    exited = false;
    for (size_t k = pb; k < pe; ++k) {
      uint32_t s, par;
      w.Decode(cfgs[k], s, par);
      const int32_t t = p.Next(s, b);
      if (t < 0) continue;
      const auto ts = static_cast<uint32_t>(t);
      if (par == kNone && simple[ts]) {
        const uint32_t c = kBase | ts;
        if (std::find(cfgs.begin() + static_cast<ptrdiff_t>(pe), cfgs.end(), c) == cfgs.end()) {
          cfgs.push_back(c);
        }
        continue;
      }
      w.Close(w.Make(ts, par), cfgs, pe, exited);
    }
    if (level.size() < d + 2u) level.resize(d + 2u);
    level[d + 1] = cfgs.size();
    live = cfgs.size() > pe;
    tokens_at(i, live || exited);
    if (exited) r.exits.push_back(node.depth);
    if (live) {
      ++i;
    } else {
      r.Uncertain(trie, i + 1, node.end);
      i = node.end;
    }
  }
  r.exits.resize(exits_below);
}

}  // namespace

TokenClasses CompiledGrammar::Classify(uint32_t s0) const {
  const Pda& p = pda_;
  const TokenVocabulary::Trie& trie = vocab_->trie();
  const size_t n_nodes = trie.size();
  WalkResult r;
  r.accepted.assign(vocab_->mask_words(), 0);
  // Fast loop: while the path stays in states without calls (a plain DFA walk of the base
  // frame), one table lookup per trie node; a state with calls hands its subtree to WalkSubtree.
  // When the frame can never have a caller (the root rule, never called), completing it with
  // bytes left over rejects the token, so exits need not be recorded.
  const bool record_exits = !root_only_[p.state_rule[s0]];
  std::vector<int32_t> state_at(65537, -1);  // by depth (token lengths are below 65536)
  state_at[0] = static_cast<int32_t>(s0);
  const int32_t* next = p.next.data();
  const uint8_t* flags = p.flags.data();
  const uint32_t* calls = p.call_begin.data();
  const uint8_t* byte_class = p.byte_class.data();
  const TokenVocabulary::TrieNode* nodes = trie.nodes.data();
  const int32_t* node_tokens = trie.node_tokens.data();
  const uint16_t* chain = chain_.data();
  const uint64_t* ugroups = ugroups_.data();
  const uint8_t* utf8_loop = utf8_loop_.data();
  constexpr uint8_t kUtf8Whole = TokenVocabulary::kUtf8Boundary | TokenVocabulary::kUtf8Below;
  constexpr uint64_t kAsciiGroups = (uint64_t{1} << 42) - 1;
  uint64_t* acc = r.accepted.data();
  int32_t* st = state_at.data();
  const size_t nc = p.n_classes;
  size_t n_acc = 0;
  for (size_t i = 0; i < n_nodes;) {
    const TokenVocabulary::TrieNode& node = nodes[i];
    const uint32_t d = node.depth;
    if (!r.exits.empty()) {
      while (!r.exits.empty() && r.exits.back() >= d) r.exits.pop_back();
    }
    const int32_t t = next[static_cast<size_t>(st[d - 1]) * nc + byte_class[node.byte]];
    if (t < 0) {
      r.Uncertain(trie, i, node.end);
      i = node.end;
      continue;
    }
    const auto ts = static_cast<uint32_t>(t);
    if (calls[ts] != calls[ts + 1]) {
      r.n_accepted = n_acc;
      WalkSubtree(p, simple_, trie, i, d, kBase | ts, r);
      n_acc = r.n_accepted;
      i = node.end;
      continue;
    }
    const bool live = flags[ts] & Pda::kHasBytes, exited = flags[ts] & Pda::kFinal;
    if (live && !exited && node.height > 0 && chain[ts] >= node.height &&
        (node.below & ~ugroups[ts]) == 0) {
      // Every token of the subtree stays on the uniform chain: all accepted.
      const uint32_t k0 = node.tok_begin, k1 = nodes[node.end].tok_begin;
      for (uint32_t k = k0; k < k1; ++k) {
        const auto id = static_cast<uint32_t>(node_tokens[k]);
        acc[id >> 6] |= uint64_t{1} << (id & 63);
      }
      n_acc += k1 - k0;
      i = node.end;
      continue;
    }
    if (live && !exited && node.height > 0 && utf8_loop[ts] &&
        (node.utf8 & kUtf8Whole) == kUtf8Whole && (node.below & kAsciiGroups & ~ugroups[ts]) == 0) {
      // At a character boundary, inside a state every character loops back to: all accepted.
      const uint32_t k0 = node.tok_begin, k1 = nodes[node.end].tok_begin;
      for (uint32_t k = k0; k < k1; ++k) {
        const auto id = static_cast<uint32_t>(node_tokens[k]);
        acc[id >> 6] |= uint64_t{1} << (id & 63);
      }
      n_acc += k1 - k0;
      i = node.end;
      continue;
    }
    if (live || exited) {
      for (uint32_t k = node.tok_begin; k < nodes[i + 1].tok_begin; ++k) {
        const auto id = static_cast<uint32_t>(node_tokens[k]);
        acc[id >> 6] |= uint64_t{1} << (id & 63);
        ++n_acc;
      }
    } else {
      r.Uncertain(trie, i, i + 1);
    }
    if (exited && record_exits) r.exits.push_back(static_cast<uint16_t>(d));
    if (live) {
      st[d] = t;
      ++i;
    } else {
      r.Uncertain(trie, i + 1, node.end);
      i = node.end;
    }
  }
  r.n_accepted = n_acc;
  TokenClasses out;
  out.uncertain = std::move(r.uncertain);
  std::vector<uint64_t>& accepted = r.accepted;
  const size_t n_accepted = r.n_accepted;
  std::sort(out.uncertain.begin(), out.uncertain.end());
  out.n_accepted = n_accepted;
  // Pick the smallest form.
  const std::span<const uint64_t> all = vocab_->trie_tokens();
  size_t n_trie = 0;
  for (uint64_t x : all) n_trie += static_cast<size_t>(__builtin_popcountll(x));
  const size_t n_rejected = n_trie - n_accepted;
  const size_t small = static_cast<size_t>(vocab_->size()) / 16;
  if (n_accepted <= small) {
    out.form = TokenClasses::Form::kAccepted;
    for (size_t wi = 0; wi < accepted.size(); ++wi) {
      for (uint64_t x = accepted[wi]; x; x &= x - 1) {
        out.ids.push_back(static_cast<int32_t>(wi * 64 + static_cast<size_t>(__builtin_ctzll(x))));
      }
    }
  } else if (n_rejected <= small) {
    out.form = TokenClasses::Form::kRejected;
    for (size_t wi = 0; wi < accepted.size(); ++wi) {
      for (uint64_t x = all[wi] & ~accepted[wi]; x; x &= x - 1) {
        out.ids.push_back(static_cast<int32_t>(wi * 64 + static_cast<size_t>(__builtin_ctzll(x))));
      }
    }
  } else {
    out.form = TokenClasses::Form::kBitset;
    out.bits = std::move(accepted);
  }
  return out;
}

std::shared_ptr<const CompiledGrammar> CompileGbnf(std::string_view text,
                                                   std::shared_ptr<const TokenVocabulary> vocab,
                                                   const GrammarLimits& limits) {
  return std::make_shared<const CompiledGrammar>(CompileGrammar(ParseGbnf(text, limits), limits),
                                                 std::move(vocab));
}

}  // namespace crossword::grammar
