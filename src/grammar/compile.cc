// Grammar -> Pda: rule analysis (nullable, productive, left recursion, recursion), inlining,
// Thompson construction per rule and subset construction over byte classes and call symbols.
#include <algorithm>
#include <unordered_map>

#include "grammar/pda.h"

namespace crossword::grammar {
namespace {

constexpr uint64_t kInlineMaxStates = 4096;    // a rule this large stays a call target
constexpr uint64_t kInlineMaxCopies = 65536;   // ... as does one whose copies would exceed this
constexpr uint32_t kInlineMaxHeight = 32;      // inlining chains are cut at this depth
constexpr size_t kMaxTableEntries = 16 << 20;  // DFA states x byte classes

uint64_t SatAdd(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }
uint64_t SatMul(uint64_t a, uint64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

struct VectorHash {
  size_t operator()(const std::vector<uint32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t x : v) h = (h ^ x) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

class Compiler {
 public:
  Compiler(const Grammar& g, const GrammarLimits& limits) : g_(g), limits_(limits) {}

  Pda Run() {
    const size_t n = g_.rules.size();
    CollectRefs();
    ComputeSccs();
    nullable_.assign(n, 0);
    productive_.assign(n, 0);
    ForEachSccCalleesFirst([&](uint32_t r) { return Nullable(g_.rules[r].body); }, nullable_);
    ForEachSccCalleesFirst([&](uint32_t r) { return Productive(g_.rules[r].body); }, productive_);
    CheckLeftRecursion();
    if (!productive_[g_.root]) {
      std::string names;
      for (uint32_t r = 0; r < n && names.size() < 200; ++r) {
        if (!productive_[r]) names += (names.empty() ? "'" : ", '") + g_.rules[r].name + "'";
      }
      FailGrammar(ErrorKind::kEmpty,
                  "grammar: it admits no string at all: rule 'root' can never complete (rules "
                  "that cannot complete: {})",
                  names);
    }
    DecideInlining();
    ComputeByteClasses();
    BuildRules();
    return Finish();
  }

 private:
  // ---- rule analysis ----

  void CollectRefs() {
    refs_.assign(g_.rules.size(), {});
    std::vector<uint32_t> seen(g_.nodes.size(), UINT32_MAX), stack;
    for (uint32_t r = 0; r < g_.rules.size(); ++r) {
      stack.assign(1, g_.rules[r].body);
      while (!stack.empty()) {
        const uint32_t id = stack.back();
        stack.pop_back();
        if (seen[id] == r) continue;
        seen[id] = r;
        const Node& node = g_.nodes[id];
        if (node.kind == NodeKind::kRef) refs_[r].push_back(node.rule);
        for (uint32_t k : node.kids) stack.push_back(k);
      }
      std::sort(refs_[r].begin(), refs_[r].end());
      refs_[r].erase(std::unique(refs_[r].begin(), refs_[r].end()), refs_[r].end());
    }
  }

  // Tarjan's algorithm without recursion; SCCs come out callees first.
  void ComputeSccs() {
    const uint32_t n = static_cast<uint32_t>(g_.rules.size());
    std::vector<int64_t> index(n, -1), low(n, 0);
    std::vector<uint8_t> on_stack(n, 0);
    std::vector<uint32_t> stack;
    std::vector<std::pair<uint32_t, size_t>> work;  // (rule, next ref to look at)
    scc_of_.assign(n, 0);
    recursive_.assign(n, 0);
    int64_t counter = 0;
    for (uint32_t s = 0; s < n; ++s) {
      if (index[s] >= 0) continue;
      work.emplace_back(s, 0);
      while (!work.empty()) {
        auto& [v, i] = work.back();
        if (i == 0 && index[v] < 0) {
          index[v] = low[v] = counter++;
          stack.push_back(v);
          on_stack[v] = 1;
        }
        if (i < refs_[v].size()) {
          const uint32_t w = refs_[v][i++];
          if (index[w] < 0) {
            work.emplace_back(w, 0);
          } else if (on_stack[w]) {
            low[v] = std::min(low[v], index[w]);
          }
          continue;
        }
        if (low[v] == index[v]) {
          std::vector<uint32_t> members;
          uint32_t w;
          do {
            w = stack.back();
            stack.pop_back();
            on_stack[w] = 0;
            scc_of_[w] = static_cast<uint32_t>(sccs_.size());
            members.push_back(w);
          } while (w != v);
          if (members.size() > 1) {
            for (uint32_t m : members) recursive_[m] = 1;
          } else if (std::binary_search(refs_[v].begin(), refs_[v].end(), v)) {
            recursive_[v] = 1;
          }
          sccs_.push_back(std::move(members));
        }
        const uint32_t done = v;
        work.pop_back();
        if (!work.empty()) {
          const uint32_t parent = work.back().first;
          low[parent] = std::min(low[parent], low[done]);
        }
      }
    }
  }

  // Evaluates a monotone rule property to its least fixpoint, one SCC at a time.
  template <typename F>
  void ForEachSccCalleesFirst(F eval, std::vector<uint8_t>& value) {
    for (const auto& members : sccs_) {
      bool changed = true;
      while (changed) {
        changed = false;
        for (uint32_t r : members) {
          if (!value[r] && eval(r)) {
            value[r] = 1;
            changed = true;
          }
        }
      }
    }
  }

  // Node-level properties under the current rule values (recursion depth is bounded by the
  // parser's nesting limit).
  bool Nullable(uint32_t id) {
    const Node& n = g_.nodes[id];
    switch (n.kind) {
      case NodeKind::kBytes:
        return false;
      case NodeKind::kRef:
        return nullable_[n.rule];
      case NodeKind::kSeq:
        for (uint32_t k : n.kids) {
          if (!Nullable(k)) return false;
        }
        return true;
      case NodeKind::kAlt:
        for (uint32_t k : n.kids) {
          if (Nullable(k)) return true;
        }
        return false;
      case NodeKind::kRepeat:
        return n.min == 0 || Nullable(n.kids[0]);
    }
    return false;
  }

  bool Productive(uint32_t id) {
    const Node& n = g_.nodes[id];
    switch (n.kind) {
      case NodeKind::kBytes:
        return !n.bytes.Empty();
      case NodeKind::kRef:
        return productive_[n.rule];
      case NodeKind::kSeq:
        for (uint32_t k : n.kids) {
          if (!Productive(k)) return false;
        }
        return true;
      case NodeKind::kAlt:
        for (uint32_t k : n.kids) {
          if (Productive(k)) return true;
        }
        return false;
      case NodeKind::kRepeat:
        return n.min == 0 || Productive(n.kids[0]);
    }
    return false;
  }

  // Rules that can start a rule's body after a nullable prefix.
  void FirstRefs(uint32_t id, std::vector<uint32_t>& out) {
    const Node& n = g_.nodes[id];
    switch (n.kind) {
      case NodeKind::kBytes:
        return;
      case NodeKind::kRef:
        out.push_back(n.rule);
        return;
      case NodeKind::kSeq:
        for (uint32_t k : n.kids) {
          FirstRefs(k, out);
          if (!Nullable(k)) return;
        }
        return;
      case NodeKind::kAlt:
        for (uint32_t k : n.kids) FirstRefs(k, out);
        return;
      case NodeKind::kRepeat:
        if (n.max > 0) FirstRefs(n.kids[0], out);
        return;
    }
  }

  void CheckLeftRecursion() {
    const uint32_t n = static_cast<uint32_t>(g_.rules.size());
    std::vector<std::vector<uint32_t>> first(n);
    for (uint32_t r = 0; r < n; ++r) {
      FirstRefs(g_.rules[r].body, first[r]);
      std::sort(first[r].begin(), first[r].end());
      first[r].erase(std::unique(first[r].begin(), first[r].end()), first[r].end());
    }
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;
    for (uint32_t s = 0; s < n; ++s) {
      if (color[s]) continue;
      path.emplace_back(s, 0);
      color[s] = 1;
      while (!path.empty()) {
        auto& [v, i] = path.back();
        if (i < first[v].size()) {
          const uint32_t w = first[v][i++];
          if (color[w] == 1) {
            std::string cycle;
            bool in = false;
            for (const auto& [p, unused] : path) {
              if (p == w) in = true;
              if (in) cycle += g_.rules[p].name + " -> ";
            }
            cycle += g_.rules[w].name;
            const Rule& rw = g_.rules[w];
            FailGrammar(ErrorKind::kLeftRecursion,
                        "grammar: line {}: rule '{}' is left-recursive ({}): it can reach itself "
                        "before consuming any input; rewrite it with repetition, e.g. "
                        "a ::= b (\"op\" b)*",
                        rw.line, rw.name, cycle);
          }
          if (color[w] == 0) {
            color[w] = 1;
            path.emplace_back(w, 0);
          }
          continue;
        }
        color[v] = 2;
        path.pop_back();
      }
    }
  }

  // ---- inlining ----

  uint64_t Size(uint32_t id) {
    const Node& n = g_.nodes[id];
    switch (n.kind) {
      case NodeKind::kBytes:
        return 1;
      case NodeKind::kRef:
        if (!productive_[n.rule] || keep_[n.rule]) return 1;
        return size_[n.rule];
      case NodeKind::kSeq: {
        uint64_t s = 0;
        for (uint32_t k : n.kids) s = SatAdd(s, Size(k));
        return s;
      }
      case NodeKind::kAlt: {
        uint64_t s = 1;
        for (uint32_t k : n.kids) s = SatAdd(s, Size(k));
        return s;
      }
      case NodeKind::kRepeat: {
        const uint64_t copies = n.max == kUnbounded ? uint64_t{n.min} + 1 : uint64_t{n.max};
        return SatAdd(SatMul(copies, Size(n.kids[0])), 1);
      }
    }
    return 1;
  }

  uint32_t Height(uint32_t id) {
    const Node& n = g_.nodes[id];
    if (n.kind == NodeKind::kRef) {
      return !productive_[n.rule] || keep_[n.rule] ? 0 : height_[n.rule];
    }
    uint32_t h = 0;
    for (uint32_t k : n.kids) h = std::max(h, Height(k));
    return h;
  }

  void DecideInlining() {
    const size_t n = g_.rules.size();
    keep_.assign(n, 0);
    size_.assign(n, 1);
    height_.assign(n, 0);
    std::vector<uint64_t> uses(n, 0);
    for (size_t r = 0; r < n; ++r) {
      for (uint32_t w : refs_[r]) ++uses[w];
    }
    for (const auto& members : sccs_) {
      for (uint32_t r : members) {
        if (recursive_[r] || r == g_.root) keep_[r] = 1;
      }
      for (uint32_t r : members) {
        size_[r] = Size(g_.rules[r].body);
        height_[r] = Height(g_.rules[r].body) + 1;
        if (size_[r] > kInlineMaxStates || SatMul(size_[r], uses[r]) > kInlineMaxCopies ||
            height_[r] > kInlineMaxHeight) {
          keep_[r] = 1;
        }
      }
    }
  }

  // ---- byte classes ----

  void ComputeByteClasses() {
    std::vector<ByteSet> sets;
    for (const Node& node : g_.nodes) {
      if (node.kind == NodeKind::kBytes) sets.push_back(node.bytes);
    }
    std::sort(sets.begin(), sets.end(),
              [](const ByteSet& a, const ByteSet& b) { return a.w < b.w; });
    sets.erase(std::unique(sets.begin(), sets.end()), sets.end());
    std::array<uint16_t, 256> cls{};
    uint32_t count = 1;
    for (const ByteSet& s : sets) {
      std::array<int32_t, 512> remap;
      remap.fill(-1);
      uint32_t next = 0;
      for (unsigned b = 0; b < 256; ++b) {
        const size_t key = cls[b] * 2u + (s.Has(static_cast<uint8_t>(b)) ? 1 : 0);
        if (remap[key] < 0) remap[key] = static_cast<int32_t>(next++);
        cls[b] = static_cast<uint16_t>(remap[key]);
      }
      count = next;
    }
    n_classes_ = count;
    for (unsigned b = 0; b < 256; ++b) byte_class_[b] = static_cast<uint8_t>(cls[b]);
  }

  ByteSet ClassesOf(const ByteSet& bytes) const {
    ByteSet c;
    for (unsigned b = 0; b < 256; ++b) {
      if (bytes.Has(static_cast<uint8_t>(b))) c.Set(byte_class_[b]);
    }
    return c;
  }

  // ---- Thompson construction (per kept rule) ----

  struct Edge {
    uint32_t from, to;
    uint32_t label;  // kEps, or a call (rule + kCallBase), or an index into class_sets_
  };
  static constexpr uint32_t kEps = UINT32_MAX;
  static constexpr uint32_t kCallBase = 0x80000000u;

  uint32_t NewState() {
    if (++nfa_total_ > limits_.max_nfa_states) {
      FailGrammar(ErrorKind::kTooLarge,
                  "grammar: more than {} automaton states after expanding repetitions; use "
                  "smaller repetition counts",
                  limits_.max_nfa_states);
    }
    return nfa_states_++;
  }

  uint32_t ClassSetIndex(uint32_t node_id) {
    auto it = class_set_of_node_.find(node_id);
    if (it != class_set_of_node_.end()) return it->second;
    class_sets_.push_back(ClassesOf(g_.nodes[node_id].bytes));
    const uint32_t idx = static_cast<uint32_t>(class_sets_.size() - 1);
    class_set_of_node_.emplace(node_id, idx);
    return idx;
  }

  // Adds the automaton of node `id` starting at state `s` and returns its exit state. No
  // construct adds edges into its start state, so alternatives may share one.
  uint32_t Build(uint32_t id, uint32_t s) {
    const Node& n = g_.nodes[id];
    switch (n.kind) {
      case NodeKind::kBytes: {
        const uint32_t t = NewState();
        if (!n.bytes.Empty()) edges_.push_back({s, t, ClassSetIndex(id)});
        return t;
      }
      case NodeKind::kRef: {
        if (!productive_[n.rule]) return NewState();  // unreachable exit: the branch is dead
        if (!keep_[n.rule]) return Build(g_.rules[n.rule].body, s);
        const uint32_t t = NewState();
        edges_.push_back({s, t, kCallBase + n.rule});
        return t;
      }
      case NodeKind::kSeq:
        for (uint32_t k : n.kids) s = Build(k, s);
        return s;
      case NodeKind::kAlt: {
        const uint32_t e = NewState();
        for (uint32_t k : n.kids) edges_.push_back({Build(k, s), e, kEps});
        return e;
      }
      case NodeKind::kRepeat: {
        const uint32_t kid = n.kids[0];
        for (uint32_t i = 0; i < n.min; ++i) s = Build(kid, s);
        if (n.max == kUnbounded) {
          const uint32_t loop = NewState();
          edges_.push_back({s, loop, kEps});
          edges_.push_back({Build(kid, loop), loop, kEps});
          return loop;
        }
        const uint32_t e = NewState();
        for (uint32_t i = n.min; i < n.max; ++i) {
          edges_.push_back({s, e, kEps});
          s = Build(kid, s);
        }
        edges_.push_back({s, e, kEps});
        return e;
      }
    }
    return s;
  }

  // ---- subset construction ----

  [[noreturn]] void FailSteps() const {
    FailGrammar(ErrorKind::kTooLarge,
                "grammar: determinizing it takes more than {} steps (nested repetitions?); use "
                "smaller repetition counts",
                limits_.max_closure_steps);
  }

  void Closure(std::vector<uint32_t>& set) {
    ++closure_stamp_;
    std::vector<uint32_t>& stack = scratch_;
    stack = set;
    set.clear();
    while (!stack.empty()) {
      const uint32_t s = stack.back();
      stack.pop_back();
      if (++closure_steps_ > limits_.max_closure_steps) FailSteps();
      if (mark_[s] == closure_stamp_) continue;
      mark_[s] = closure_stamp_;
      set.push_back(s);
      for (uint32_t e = eps_begin_[s]; e < eps_begin_[s + 1]; ++e) stack.push_back(eps_to_[e]);
    }
    std::sort(set.begin(), set.end());
  }

  // Determinizes the kept rules the root can reach.
  void BuildRules() {
    rule_start_.assign(g_.rules.size(), UINT32_MAX);
    std::vector<uint8_t> reached(g_.rules.size(), 0);
    std::vector<uint32_t> stack{g_.root};
    reached[g_.root] = 1;
    while (!stack.empty()) {
      const uint32_t r = stack.back();
      stack.pop_back();
      for (uint32_t w : refs_[r]) {
        if (!reached[w] && productive_[w]) {
          reached[w] = 1;
          stack.push_back(w);
        }
      }
    }
    for (uint32_t r = 0; r < g_.rules.size(); ++r) {
      if (reached[r] && keep_[r]) Determinize(r);
    }
  }

  void Determinize(uint32_t rule) {
    edges_.clear();
    nfa_states_ = 0;
    const uint32_t start = NewState();
    const uint32_t accept = Build(g_.rules[rule].body, start);
    // CSR of epsilon edges and of labelled edges.
    const uint32_t ns = nfa_states_;
    eps_begin_.assign(ns + 1, 0);
    lab_begin_.assign(ns + 1, 0);
    for (const Edge& e : edges_) ++(e.label == kEps ? eps_begin_ : lab_begin_)[e.from + 1];
    for (uint32_t i = 0; i < ns; ++i) {
      eps_begin_[i + 1] += eps_begin_[i];
      lab_begin_[i + 1] += lab_begin_[i];
    }
    eps_to_.assign(eps_begin_[ns], 0);
    lab_.assign(lab_begin_[ns], {});
    {
      std::vector<uint32_t> pe(eps_begin_.begin(), eps_begin_.end() - 1);
      std::vector<uint32_t> pl(lab_begin_.begin(), lab_begin_.end() - 1);
      for (const Edge& e : edges_) {
        if (e.label == kEps) {
          eps_to_[pe[e.from]++] = e.to;
        } else {
          lab_[pl[e.from]++] = e;
        }
      }
    }
    mark_.assign(ns, 0);
    closure_stamp_ = 0;

    std::unordered_map<std::vector<uint32_t>, uint32_t, VectorHash> index;
    std::vector<std::vector<uint32_t>> sets;
    auto intern = [&](std::vector<uint32_t>& set) -> uint32_t {
      Closure(set);
      // Keep the states that matter (those with byte or call edges, and the accepting one):
      // sets that differ only in pass-through states behave alike and become one DFA state.
      set.erase(std::remove_if(
                    set.begin(), set.end(),
                    [&](uint32_t x) { return x != accept && lab_begin_[x] == lab_begin_[x + 1]; }),
                set.end());
      auto [it, added] = index.try_emplace(set, static_cast<uint32_t>(dfa_.size()));
      if (added) {
        if (dfa_.size() >= limits_.max_dfa_states ||
            (dfa_.size() + 1) * n_classes_ > 2 * kMaxTableEntries) {
          FailGrammar(ErrorKind::kTooLarge,
                      "grammar: more than {} automaton states (rule '{}'); simplify the grammar",
                      std::min<size_t>(limits_.max_dfa_states, 2 * kMaxTableEntries / n_classes_),
                      g_.rules[rule].name);
        }
        dfa_set_states_ += set.size();
        if (dfa_set_states_ > limits_.max_dfa_set_states) {
          FailGrammar(ErrorKind::kTooLarge,
                      "grammar: its automaton holds more than {} states while determinizing (rule "
                      "'{}'; nested repetitions?); use smaller repetition counts",
                      limits_.max_dfa_set_states, g_.rules[rule].name);
        }
        DState d;
        d.rule = rule;
        d.next.assign(n_classes_, -1);
        dfa_.push_back(std::move(d));
        sets.push_back(set);
      }
      return it->second;
    };
    std::vector<uint32_t> init{start};
    const uint32_t first = intern(init);
    rule_start_[rule] = first;
    std::vector<std::vector<uint32_t>> bucket(n_classes_);
    std::vector<uint32_t> touched;
    std::vector<std::pair<uint32_t, uint32_t>> call_targets;  // (rule, nfa target)
    for (uint32_t d = first; d < dfa_.size(); ++d) {
      const std::vector<uint32_t> set = sets[d - first];
      touched.clear();
      call_targets.clear();
      for (uint32_t s : set) {
        if (s == accept) dfa_[d].final = true;
        for (uint32_t e = lab_begin_[s]; e < lab_begin_[s + 1]; ++e) {
          const Edge& edge = lab_[e];
          if (edge.label >= kCallBase) {
            call_targets.emplace_back(edge.label - kCallBase, edge.to);
            continue;
          }
          const ByteSet& cs = class_sets_[edge.label];
          // This loop is work too: with ~240 byte classes it can outweigh the closures.
          closure_steps_ += n_classes_;
          if (closure_steps_ > limits_.max_closure_steps) FailSteps();
          for (uint32_t c = 0; c < n_classes_; ++c) {
            if (!cs.Has(static_cast<uint8_t>(c))) continue;
            if (bucket[c].empty()) touched.push_back(c);
            bucket[c].push_back(edge.to);
          }
        }
      }
      for (uint32_t c : touched) {
        std::vector<uint32_t> target = std::move(bucket[c]);
        bucket[c].clear();
        const uint32_t t = intern(target);
        dfa_[d].next[c] = static_cast<int32_t>(t);
      }
      std::sort(call_targets.begin(), call_targets.end());
      for (size_t i = 0; i < call_targets.size();) {
        const uint32_t callee = call_targets[i].first;
        std::vector<uint32_t> target;
        for (; i < call_targets.size() && call_targets[i].first == callee; ++i) {
          target.push_back(call_targets[i].second);
        }
        const uint32_t t = intern(target);
        dfa_[d].calls.emplace_back(callee, t);
      }
    }
  }

  // ---- trimming and the final tables ----

  Pda Finish() {
    const uint32_t n = static_cast<uint32_t>(dfa_.size());
    // Co-reachability: states from which the rule can complete.
    std::vector<std::vector<uint32_t>> rev(n);
    for (uint32_t s = 0; s < n; ++s) {
      for (int32_t t : dfa_[s].next) {
        if (t >= 0) rev[t].push_back(s);
      }
      for (auto [callee, t] : dfa_[s].calls) {
        if (rule_start_[callee] != UINT32_MAX) rev[t].push_back(s);
      }
    }
    std::vector<uint8_t> live(n, 0);
    std::vector<uint32_t> stack;
    for (uint32_t s = 0; s < n; ++s) {
      if (dfa_[s].final) {
        live[s] = 1;
        stack.push_back(s);
      }
    }
    while (!stack.empty()) {
      const uint32_t s = stack.back();
      stack.pop_back();
      for (uint32_t p : rev[s]) {
        if (!live[p]) {
          live[p] = 1;
          stack.push_back(p);
        }
      }
    }
    // Forward reachability from the root's start through live states only.
    std::vector<uint8_t> reach(n, 0);
    const uint32_t root_start = rule_start_[g_.root];
    if (!live[root_start]) {
      FailGrammar(ErrorKind::kEmpty, "grammar: it admits no string at all (rule 'root')");
    }
    stack.assign(1, root_start);
    reach[root_start] = 1;
    auto visit = [&](uint32_t t) {
      if (live[t] && !reach[t]) {
        reach[t] = 1;
        stack.push_back(t);
      }
    };
    while (!stack.empty()) {
      const uint32_t s = stack.back();
      stack.pop_back();
      for (int32_t t : dfa_[s].next) {
        if (t >= 0) visit(static_cast<uint32_t>(t));
      }
      for (auto [callee, t] : dfa_[s].calls) {
        const uint32_t cs = rule_start_[callee];
        if (cs == UINT32_MAX || !live[cs] || !live[t]) continue;
        visit(cs);
        visit(t);
      }
    }
    std::vector<int32_t> renum(n, -1);
    Pda p;
    for (uint32_t s = 0; s < n; ++s) {
      if (reach[s]) renum[s] = static_cast<int32_t>(p.n_states++);
    }
    if (static_cast<size_t>(p.n_states) * n_classes_ > kMaxTableEntries) {
      FailGrammar(ErrorKind::kTooLarge,
                  "grammar: its automaton ({} states x {} byte classes) is too large; simplify "
                  "the grammar",
                  p.n_states, n_classes_);
    }
    p.n_classes = n_classes_;
    p.byte_class = byte_class_;
    p.next.assign(static_cast<size_t>(p.n_states) * n_classes_, -1);
    p.flags.assign(p.n_states, 0);
    p.state_rule.assign(p.n_states, 0);
    p.call_begin.assign(p.n_states + 1, 0);
    std::vector<int32_t> rule_slot(g_.rules.size(), -1);
    for (uint32_t s = 0; s < n; ++s) {
      if (renum[s] < 0) continue;
      const uint32_t ns = static_cast<uint32_t>(renum[s]);
      const DState& d = dfa_[s];
      if (rule_slot[d.rule] < 0) {
        rule_slot[d.rule] = static_cast<int32_t>(p.rule_names.size());
        p.rule_names.push_back(g_.rules[d.rule].name);
      }
      p.state_rule[ns] = static_cast<uint32_t>(rule_slot[d.rule]);
      uint8_t flags = d.final ? Pda::kFinal : 0;
      for (uint32_t c = 0; c < n_classes_; ++c) {
        const int32_t t = d.next[c];
        if (t >= 0 && renum[t] >= 0) {
          p.next[static_cast<size_t>(ns) * n_classes_ + c] = renum[t];
          flags |= Pda::kHasBytes;
        }
      }
      p.flags[ns] = flags;
    }
    // Calls, in state order.
    std::vector<std::vector<Pda::Call>> calls(p.n_states);
    for (uint32_t s = 0; s < n; ++s) {
      if (renum[s] < 0) continue;
      for (auto [callee, t] : dfa_[s].calls) {
        const uint32_t cs = rule_start_[callee];
        if (cs == UINT32_MAX || renum[cs] < 0 || renum[t] < 0) continue;
        calls[renum[s]].push_back(
            {static_cast<uint32_t>(renum[cs]), static_cast<uint32_t>(renum[t]), false});
      }
    }
    for (uint32_t s = 0; s < p.n_states; ++s) {
      p.call_begin[s + 1] = p.call_begin[s] + static_cast<uint32_t>(calls[s].size());
      for (Pda::Call c : calls[s]) p.calls.push_back(c);
    }
    for (Pda::Call& c : p.calls) {
      c.tail = p.flags[c.ret] == Pda::kFinal && p.call_begin[c.ret] == p.call_begin[c.ret + 1];
    }
    p.start = static_cast<uint32_t>(renum[root_start]);
    return p;
  }

  struct DState {
    uint32_t rule = 0;
    bool final = false;
    std::vector<int32_t> next;
    std::vector<std::pair<uint32_t, uint32_t>> calls;  // (callee rule, state after return)
  };

  const Grammar& g_;
  GrammarLimits limits_;
  std::vector<std::vector<uint32_t>> refs_;
  std::vector<std::vector<uint32_t>> sccs_;
  std::vector<uint32_t> scc_of_;
  std::vector<uint8_t> recursive_, nullable_, productive_, keep_;
  std::vector<uint64_t> size_;
  std::vector<uint32_t> height_;
  uint32_t n_classes_ = 1;
  std::array<uint8_t, 256> byte_class_{};
  std::vector<ByteSet> class_sets_;
  std::unordered_map<uint32_t, uint32_t> class_set_of_node_;
  std::vector<Edge> edges_, lab_;
  uint32_t nfa_states_ = 0;
  size_t nfa_total_ = 0;
  std::vector<uint32_t> eps_begin_, eps_to_, lab_begin_, mark_, scratch_;
  uint32_t closure_stamp_ = 0;
  uint64_t closure_steps_ = 0;  // over all rules (GrammarLimits::max_closure_steps)
  size_t dfa_set_states_ = 0;   // over all rules (GrammarLimits::max_dfa_set_states)
  std::vector<DState> dfa_;
  std::vector<uint32_t> rule_start_;
};

}  // namespace

Pda CompileGrammar(const Grammar& g, const GrammarLimits& limits) {
  return Compiler(g, limits).Run();
}

}  // namespace crossword::grammar
