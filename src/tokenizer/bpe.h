// BPE merging over token ids: a flat hash table of merge ranks and two equivalent merge loops
// (a linear scan for short pieces, a heap for long ones) that tests compare with each other.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace crossword::tokenizer {

/// Merge rules keyed by the (left id, right id) pair: rank (0 = merged first) and result id.
/// Open addressing with linear probing; immutable after building, so lookups are thread-safe.
class MergeTable {
 public:
  struct Entry {
    int32_t rank;
    int32_t result;
  };

  /// Sizes the table for `n` merges (call once, before Insert).
  void Reserve(size_t n);
  /// Adds a rule; returns false (and keeps the first) when the pair is already present.
  bool Insert(int32_t left, int32_t right, int32_t rank, int32_t result);
  /// The rule for (left, right), or nullptr.
  const Entry* Find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    uint64_t key = Key(left, right);
    for (uint64_t i = Hash(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.entry;
      if (s.key == kEmptyKey) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmptyKey;
    Entry entry{};
  };
  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  uint64_t Hash(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }

  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

/// Which merge loop BpeMerge uses. Both give identical results (tested); kAuto picks the scan
/// for short inputs and the heap beyond `kHeapThreshold` symbols.
enum class BpeAlgorithm { kAuto, kScan, kHeap };
inline constexpr size_t kHeapThreshold = 48;

/// Applies the merges to `symbols` (initial ids, one per byte-level character) until no
/// adjacent pair has a rule: repeatedly merge the lowest-rank pair, the leftmost one on ties
/// (the order of HF tokenizers' BPE model and llama.cpp). Appends the final ids to `out`.
void BpeMerge(std::span<const int32_t> symbols, const MergeTable& merges, std::vector<int32_t>& out,
              BpeAlgorithm algorithm = BpeAlgorithm::kAuto);

}  // namespace crossword::tokenizer
