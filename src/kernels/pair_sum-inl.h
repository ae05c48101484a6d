// Per-target helper shared by gdn.cc (RowsBlocked) and attention.cc (ChunkScores): many dot
// products at once, each left as a vector of partial products until one transpose-and-add tree
// turns them into one vector whose lane r holds sum r. Included after hwy/highway.h by files that
// compile per Highway target (foreach_target re-includes it once per target: the guard below
// toggles with HWY_TARGET_TOGGLE, Highway's convention for -inl.h headers).
#if defined(CROSSWORD_KERNELS_PAIR_SUM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CROSSWORD_KERNELS_PAIR_SUM_INL_H_
#undef CROSSWORD_KERNELS_PAIR_SUM_INL_H_
#else
#define CROSSWORD_KERNELS_PAIR_SUM_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace crossword::kernels::HWY_NAMESPACE {
namespace pair_sum_detail = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
/// Level L (1-based) of the tree: two vectors of partial sums -> one, each output lane the sum of
/// two neighbouring partial sums of a or of b. Every level adds neighbours, so after
/// log2(lanes) levels over lanes vectors, lane r holds the sum of vector r's lanes in the
/// balanced order ((x0 + x1) + (x2 + x3)) + ..., in row order: the same bits on every target.
/// Generic targets: lanes [0, N/2) add adjacent lanes of a, [N/2, N) those of b (ConcatEven +
/// ConcatOdd + Add, two cross-block permutes). AVX-512 and AVX2 reach the same sums with in-lane
/// shuffles for the first two levels (`shufps` 0x88 / 0xDD: elements 0, 2 and 1, 3 of each 128-bit
/// block of a then b) and 128-bit block shuffles after them, which are cheaper and need no copy of
/// their operands; the lanes hold the partial sums in another order in between, so the levels of
/// one tree must all come from here.
template <int L, class D, class V = pair_sum_detail::Vec<D>>
HWY_INLINE V PairSumAt(D d, V a, V b) {
  static_assert(L >= 1);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  static_assert(sizeof(V) == 64, "the full 512-bit float vector");
  (void)d;
  if constexpr (L <= 2) {
    return V{_mm512_add_ps(_mm512_shuffle_ps(a.raw, b.raw, 0x88),
                           _mm512_shuffle_ps(a.raw, b.raw, 0xDD))};
  } else {
    return V{_mm512_add_ps(_mm512_shuffle_f32x4(a.raw, b.raw, 0x88),
                           _mm512_shuffle_f32x4(a.raw, b.raw, 0xDD))};
  }
#elif HWY_TARGET == HWY_AVX2
  static_assert(sizeof(V) == 32, "the full 256-bit float vector");
  (void)d;
  if constexpr (L <= 2) {
    return V{_mm256_add_ps(_mm256_shuffle_ps(a.raw, b.raw, 0x88),
                           _mm256_shuffle_ps(a.raw, b.raw, 0xDD))};
  } else {
    return V{_mm256_add_ps(_mm256_permute2f128_ps(a.raw, b.raw, 0x20),
                           _mm256_permute2f128_ps(a.raw, b.raw, 0x31))};
  }
#else
  return pair_sum_detail::Add(pair_sum_detail::ConcatEven(d, b, a),
                              pair_sum_detail::ConcatOdd(d, b, a));
#endif
}

/// The tree's first level (rows paired as they are read): PairSumAt<1>.
template <class D, class V = pair_sum_detail::Vec<D>>
HWY_INLINE V PairSum(D d, V a, V b) {
  return PairSumAt<1>(d, a, b);
}

// log2 of a power of two.
constexpr int PairSumLog2(int n) { return n <= 1 ? 0 : 1 + PairSumLog2(n / 2); }

/// The tree over p[0, M) (M a power of two <= lanes): the levels left until one vector remains,
/// p[0]. With M = lanes, lane r of p[0] is the sum of the lanes of the original p[r]; with
/// M = lanes / 2 (the vectors already paired once by PairSum), lane r is the sum of the r-th
/// vector paired into p.
template <int M, class D, class V = pair_sum_detail::Vec<D>>
HWY_INLINE V PairSumTree(D d, V* p) {
  static_assert(M >= 1 && (M & (M - 1)) == 0);
  constexpr int kLanes = static_cast<int>(sizeof(V) / sizeof(float));
  constexpr int kLevel = PairSumLog2(kLanes) - PairSumLog2(M) + 1;  // of the first level here
  if constexpr (M > 1) {
    HWY_UNROLL(8) for (int r = 0; r < M / 2; ++r) {
      p[r] = PairSumAt<kLevel>(d, p[2 * r], p[2 * r + 1]);
    }
    return PairSumTree<M / 2>(d, p);
  }
  return p[0];
}

/// Two trees at once, level by level (two independent chains for the core to overlap): p[0] and
/// q[0] as PairSumTree<M> would leave them.
template <int M, class D, class V = pair_sum_detail::Vec<D>>
HWY_INLINE void PairSumTrees(D d, V* p, V* q) {
  static_assert(M >= 1 && (M & (M - 1)) == 0);
  constexpr int kLanes = static_cast<int>(sizeof(V) / sizeof(float));
  constexpr int kLevel = PairSumLog2(kLanes) - PairSumLog2(M) + 1;
  if constexpr (M > 1) {
    HWY_UNROLL(4) for (int r = 0; r < M / 2; ++r) {
      p[r] = PairSumAt<kLevel>(d, p[2 * r], p[2 * r + 1]);
      q[r] = PairSumAt<kLevel>(d, q[2 * r], q[2 * r + 1]);
    }
    PairSumTrees<M / 2>(d, p, q);
  }
}
#endif

}  // namespace crossword::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // CROSSWORD_KERNELS_PAIR_SUM_INL_H_
