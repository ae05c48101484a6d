// BPE merge table and merge loops (see bpe.h).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <utility>

namespace crossword::tokenizer {
namespace {

constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();

int32_t RankOf(const MergeTable& merges, int32_t left, int32_t right) {
  const MergeTable::Entry* e = merges.Find(left, right);
  return e == nullptr ? kNoRank : e->rank;
}

// Quadratic but allocation-light: ids and pair ranks in two arrays, merged entries erased.
void MergeScan(std::span<const int32_t> symbols, const MergeTable& merges,
               std::vector<int32_t>& out) {
  std::vector<int32_t> ids(symbols.begin(), symbols.end());
  std::vector<int32_t> ranks(ids.size(), kNoRank);  // ranks[i]: pair (ids[i], ids[i+1])
  for (size_t i = 0; i + 1 < ids.size(); ++i) ranks[i] = RankOf(merges, ids[i], ids[i + 1]);
  while (ids.size() > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < ids.size(); ++i) {
      if (ranks[i] < ranks[best]) best = i;  // strict: leftmost wins ties
    }
    if (ranks[best] == kNoRank) break;
    ids[best] = merges.Find(ids[best], ids[best + 1])->result;
    ids.erase(ids.begin() + static_cast<ptrdiff_t>(best) + 1);
    ranks.erase(ranks.begin() + static_cast<ptrdiff_t>(best) + 1);
    if (best + 1 < ids.size()) {
      ranks[best] = RankOf(merges, ids[best], ids[best + 1]);
    } else {
      ranks[best] = kNoRank;
    }
    if (best > 0) ranks[best - 1] = RankOf(merges, ids[best - 1], ids[best]);
  }
  out.insert(out.end(), ids.begin(), ids.end());
}

// O(n log n): a min-heap of (rank, position) candidates over a linked list of symbols. Stale
// candidates are skipped: a candidate is current iff its pair still exists with the same rank
// (a rank identifies one merge rule, hence one pair of ids).
void MergeHeap(std::span<const int32_t> symbols, const MergeTable& merges,
               std::vector<int32_t>& out) {
  const int32_t n = static_cast<int32_t>(symbols.size());
  std::vector<int32_t> ids(symbols.begin(), symbols.end());
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  using Candidate = std::pair<int32_t, int32_t>;  // (rank, left position): min rank, then leftmost
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    int32_t rank = RankOf(merges, ids[pos], ids[next[pos]]);
    if (rank != kNoRank) heap.emplace(rank, pos);
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    auto [rank, pos] = heap.top();
    heap.pop();
    if (!alive[pos] || next[pos] < 0) continue;
    int32_t right = next[pos];
    const MergeTable::Entry* e = merges.Find(ids[pos], ids[right]);
    if (e == nullptr || e->rank != rank) continue;
    ids[pos] = e->result;
    alive[right] = false;
    next[pos] = next[right];
    if (next[pos] >= 0) prev[next[pos]] = pos;
    push(prev[pos]);
    push(pos);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = next[i]) out.push_back(ids[i]);
}

}  // namespace

void MergeTable::Reserve(size_t n) {
  size_t capacity = 16;
  shift_ = 60;
  while (capacity < 2 * n + 2) {  // load factor <= 0.5 keeps probe chains short
    capacity <<= 1;
    --shift_;
  }
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  size_ = 0;
}

bool MergeTable::Insert(int32_t left, int32_t right, int32_t rank, int32_t result) {
  if (2 * (size_ + 1) > slots_.size()) {
    std::vector<Slot> old = std::move(slots_);
    Reserve(std::max<size_t>(16, old.size()));
    for (const Slot& s : old) {
      if (s.key != kEmptyKey)
        Insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key), s.entry.rank,
               s.entry.result);
    }
  }
  uint64_t key = Key(left, right);
  for (uint64_t i = Hash(key);; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) return false;
    if (s.key == kEmptyKey) {
      s.key = key;
      s.entry = {rank, result};
      ++size_;
      return true;
    }
  }
}

void BpeMerge(std::span<const int32_t> symbols, const MergeTable& merges, std::vector<int32_t>& out,
              BpeAlgorithm algorithm) {
  if (symbols.size() <= 1) {
    out.insert(out.end(), symbols.begin(), symbols.end());
    return;
  }
  if (algorithm == BpeAlgorithm::kAuto) {
    algorithm = symbols.size() <= kHeapThreshold ? BpeAlgorithm::kScan : BpeAlgorithm::kHeap;
  }
  if (algorithm == BpeAlgorithm::kScan) {
    MergeScan(symbols, merges, out);
  } else {
    MergeHeap(symbols, merges, out);
  }
}

}  // namespace crossword::tokenizer
