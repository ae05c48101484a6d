// Matcher: positions as sets of interned stacks, masks from the per-state token classes plus
// run-time checks of the uncertain tokens, cached per position.
#include "grammar/matcher.h"

#include <algorithm>

namespace crossword::grammar {
namespace {

struct VectorHash {
  size_t operator()(const std::vector<uint32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t x : v) h = (h ^ x) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

constexpr size_t kMaskCacheEntries = 64;
constexpr uint32_t kEmptyStack = 0;
// A position's parses are not merged across rule calls, so a grammar with two alternatives
// calling different rules at each of d nested levels has 2^d live stacks (d = 30: ~5 GB and
// seconds per token before these bounds). Legitimate grammars, JSON schemas' included, keep a
// handful; the bounds fail the request instead (a 400, like any other grammar error).
constexpr size_t kMaxLiveStacks = 8192;
constexpr size_t kMaxStackNodes = size_t{1} << 21;  // interned frames per matcher and its forks

}  // namespace

// Stacks are interned: node (state, parent) is one frame on top of the stack `parent`; node 0 is
// the empty stack (the root rule has completed). Shared by a matcher and its forks.
struct Matcher::Context {
  explicit Context(const Pda& pda) : p(pda) {}

  const Pda& p;
  std::vector<std::pair<uint32_t, uint32_t>> nodes{{UINT32_MAX, 0}};
  std::unordered_map<uint64_t, uint32_t> index;
  std::vector<uint32_t> stamp;
  uint32_t cur = 0;
  std::vector<uint32_t> work, pending, tmp_a, tmp_b;
  std::unordered_map<std::vector<uint32_t>, std::vector<uint64_t>, VectorHash> cache;
  std::vector<uint64_t> scratch;
  std::unordered_map<std::string, bool> suffix_memo;
  Stats stats;

  uint32_t Intern(uint32_t state, uint32_t parent) {
    const uint64_t key = (uint64_t{state} << 32) | parent;
    auto [it, added] = index.try_emplace(key, static_cast<uint32_t>(nodes.size()));
    if (added) {
      if (nodes.size() >= kMaxStackNodes) {
        index.erase(it);
        FailGrammar(ErrorKind::kTooLarge,
                    "grammar: more than {} parse stack frames while matching the answer (the "
                    "grammar is too ambiguous across rules); simplify it",
                    kMaxStackNodes);
      }
      nodes.emplace_back(state, parent);
    }
    return it->second;
  }

  // live = the stacks reachable from `pending` without consuming a byte whose top can consume
  // one, plus kEmptyStack when a stack can complete. Sorted.
  void Close(std::vector<uint32_t>& from, std::vector<uint32_t>& live) {
    live.clear();
    if (++cur == 0) {
      std::fill(stamp.begin(), stamp.end(), 0);
      cur = 1;
    }
    work.swap(from);
    while (!work.empty()) {
      const uint32_t n = work.back();
      work.pop_back();
      if (stamp.size() < nodes.size()) stamp.resize(nodes.size() * 2, 0);
      if (stamp[n] == cur) continue;
      stamp[n] = cur;
      if (n == kEmptyStack) {
        live.push_back(n);
        continue;
      }
      const auto [s, parent] = nodes[n];
      if (p.HasBytes(s)) live.push_back(n);
      for (uint32_t k = p.call_begin[s]; k < p.call_begin[s + 1]; ++k) {
        const Pda::Call& c = p.calls[k];
        work.push_back(c.tail ? Intern(c.start, parent) : Intern(c.start, Intern(c.ret, parent)));
      }
      if (p.Final(s)) work.push_back(parent);
    }
    if (live.size() > kMaxLiveStacks) {
      work.clear();
      FailGrammar(ErrorKind::kTooLarge,
                  "grammar: more than {} parses are alive at once while matching the answer (the "
                  "grammar is too ambiguous across rules); simplify it",
                  kMaxLiveStacks);
    }
    std::sort(live.begin(), live.end());
  }

  // Advances `live` by one byte into `out` (empty: the byte does not fit).
  void Step(const std::vector<uint32_t>& live, uint8_t b, std::vector<uint32_t>& out) {
    pending.clear();
    for (uint32_t n : live) {
      if (n == kEmptyStack) continue;
      const auto [s, parent] = nodes[n];
      const int32_t t = p.Next(s, b);
      if (t >= 0) pending.push_back(Intern(static_cast<uint32_t>(t), parent));
    }
    if (pending.empty()) {
      out.clear();
      return;
    }
    Close(pending, out);
  }

  // Whether the stack `n` (a caller frame at its return state) can consume `bytes`.
  bool Fits(uint32_t n, std::string_view bytes) {
    if (n == kEmptyStack) return false;  // the grammar ended: nothing may follow
    std::string key(reinterpret_cast<const char*>(&n), sizeof n);
    key.append(bytes);
    auto it = suffix_memo.find(key);
    if (it != suffix_memo.end()) return it->second;
    pending.assign(1, n);
    Close(pending, tmp_a);
    bool ok = true;
    for (char c : bytes) {
      Step(tmp_a, static_cast<uint8_t>(c), tmp_b);
      tmp_a.swap(tmp_b);
      if (tmp_a.empty()) {
        ok = false;
        break;
      }
    }
    suffix_memo.emplace(std::move(key), ok);
    return ok;
  }
};

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), ctx_(std::make_shared<Context>(grammar_->pda())) {
  Position start;
  std::vector<uint32_t> pending{ctx_->Intern(grammar_->pda().start, kEmptyStack)};
  ctx_->Close(pending, start.live);
  history_.push_back(std::move(start));
}

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<Context> ctx,
                 Position pos)
    : grammar_(std::move(grammar)), ctx_(std::move(ctx)) {
  history_.push_back(std::move(pos));
}

Matcher Matcher::Fork() const { return Matcher(grammar_, ctx_, history_.back()); }

const Matcher::Stats& Matcher::stats() const { return ctx_->stats; }

bool Matcher::CanEnd() const {
  const Position& pos = history_.back();
  return !pos.terminated && !pos.live.empty() && pos.live.front() == kEmptyStack;
}

bool Matcher::Feed(const Position& from, std::string_view bytes, Position& to) {
  Context& c = *ctx_;
  to.terminated = false;
  to.live = from.live;
  for (char ch : bytes) {
    c.Step(to.live, static_cast<uint8_t>(ch), c.tmp_b);
    to.live.swap(c.tmp_b);
    if (to.live.empty()) return false;
  }
  return true;
}

bool Matcher::IsAllowed(int32_t token) {
  const TokenVocabulary& v = grammar_->vocab();
  if (token < 0 || token >= v.size() || Terminated()) return false;
  if (v.IsEos(token)) return CanEnd();
  if (!MaskTest(v.trie_tokens(), token)) return false;
  Position to;
  return Feed(history_.back(), v.bytes(token), to);
}

bool Matcher::Accept(int32_t token) {
  const TokenVocabulary& v = grammar_->vocab();
  if (token < 0 || token >= v.size() || Terminated()) return false;
  if (v.IsEos(token)) {
    if (!CanEnd()) return false;
    Position end;
    end.terminated = true;
    history_.push_back(std::move(end));
    return true;
  }
  if (!MaskTest(v.trie_tokens(), token)) return false;
  return AcceptBytes(v.bytes(token));
}

bool Matcher::AcceptBytes(std::string_view bytes) {
  if (Terminated()) return false;
  Position to;
  if (!Feed(history_.back(), bytes, to)) return false;
  history_.push_back(std::move(to));
  return true;
}

void Matcher::Rollback(size_t n) {
  Check(n <= num_accepted(), "grammar matcher: cannot roll back {} tokens (only {} accepted)", n,
        num_accepted());
  history_.resize(history_.size() - n);
}

void Matcher::FillMask(std::span<uint64_t> mask) {
  Context& c = *ctx_;
  const TokenVocabulary& v = grammar_->vocab();
  const size_t words = v.mask_words();
  Check(mask.size() >= words, "grammar matcher: mask has {} words, needs {}", mask.size(), words);
  ++c.stats.masks;
  std::fill(mask.begin(), mask.begin() + static_cast<ptrdiff_t>(words), 0);
  const Position& pos = history_.back();
  if (pos.terminated) return;
  auto hit = c.cache.find(pos.live);
  if (hit != c.cache.end()) {
    ++c.stats.mask_cache_hits;
    std::copy(hit->second.begin(), hit->second.end(), mask.begin());
    return;
  }
  c.suffix_memo.clear();
  std::span<uint64_t> m = mask.first(words);
  std::vector<uint32_t> done_states;
  for (uint32_t n : pos.live) {
    if (n == kEmptyStack) {
      for (int32_t id : v.eos()) MaskSet(m, id);
      continue;
    }
    const auto [s, parent] = c.nodes[n];
    const TokenClasses& tc = grammar_->Classes(s);
    if (std::find(done_states.begin(), done_states.end(), s) == done_states.end()) {
      done_states.push_back(s);
      switch (tc.form) {
        case TokenClasses::Form::kAccepted:
          for (int32_t id : tc.ids) MaskSet(m, id);
          break;
        case TokenClasses::Form::kRejected: {
          const std::span<const uint64_t> all = v.trie_tokens();
          c.scratch.assign(all.begin(), all.end());
          for (int32_t id : tc.ids)
            c.scratch[static_cast<size_t>(id) >> 6] &= ~(uint64_t{1} << (id & 63));
          for (size_t i = 0; i < words; ++i) m[i] |= c.scratch[i];
          break;
        }
        case TokenClasses::Form::kBitset:
          for (size_t i = 0; i < words; ++i) m[i] |= tc.bits[i];
          break;
      }
    }
    for (const auto& [id, offset] : tc.uncertain) {
      if (MaskTest(m, id)) continue;
      ++c.stats.uncertain_checked;
      if (c.Fits(parent, v.bytes(id).substr(offset))) MaskSet(m, id);
    }
  }
  if (c.cache.size() >= kMaskCacheEntries) c.cache.clear();
  c.cache.emplace(pos.live, std::vector<uint64_t>(m.begin(), m.end()));
}

std::string Matcher::ForcedBytes(size_t max_bytes) {
  std::string out;
  if (Terminated()) return out;
  Context& c = *ctx_;
  const Pda& p = grammar_->pda();
  std::vector<uint32_t> live = history_.back().live, next;
  while (out.size() < max_bytes) {
    if (live.empty() || live.front() == kEmptyStack) break;
    int byte = -1;
    bool forced = true;
    for (uint32_t n : live) {
      const uint32_t s = c.nodes[n].first;
      for (uint32_t cls = 0; cls < p.n_classes && forced; ++cls) {
        if (p.next[static_cast<size_t>(s) * p.n_classes + cls] < 0) continue;
        const auto& bytes = grammar_->class_bytes()[cls];
        if (bytes.size() != 1 || (byte >= 0 && byte != bytes[0])) forced = false;
        byte = bytes[0];
      }
      if (!forced) break;
    }
    if (!forced || byte < 0) break;
    c.Step(live, static_cast<uint8_t>(byte), next);
    live.swap(next);
    out.push_back(static_cast<char>(byte));
  }
  return out;
}

}  // namespace crossword::grammar
