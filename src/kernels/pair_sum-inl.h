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
/// Two vectors of partial sums -> one: lanes [0, N/2) add adjacent lanes of a, lanes [N/2, N)
/// those of b (ConcatEven + ConcatOdd + Add). Applied log2(N) times over N vectors it leaves lane
/// r holding the full sum of vector r, in order.
template <class D, class V = pair_sum_detail::Vec<D>>
HWY_INLINE V PairSum(D d, V a, V b) {
  return pair_sum_detail::Add(pair_sum_detail::ConcatEven(d, b, a),
                              pair_sum_detail::ConcatOdd(d, b, a));
}

/// The tree over p[0, M) (M a power of two): PairSum levels until one vector is left, p[0]. With
/// M = lanes, lane r of p[0] is the sum of the lanes of the original p[r]; with M = lanes / 2 (the
/// pairs already summed once), lane r is the sum of the r-th vector paired into p.
template <int M, class D, class V = pair_sum_detail::Vec<D>>
HWY_INLINE V PairSumTree(D d, V* p) {
  static_assert(M >= 1 && (M & (M - 1)) == 0);
  HWY_UNROLL(4) for (int m = M; m > 1; m /= 2) {
    HWY_UNROLL(8) for (int r = 0; r < m / 2; ++r) p[r] = PairSum(d, p[2 * r], p[2 * r + 1]);
  }
  return p[0];
}

/// Two trees at once, level by level (two independent chains for the core to overlap): p[0] and
/// q[0] as PairSumTree<M> would leave them.
template <int M, class D, class V = pair_sum_detail::Vec<D>>
HWY_INLINE void PairSumTrees(D d, V* p, V* q) {
  static_assert(M >= 1 && (M & (M - 1)) == 0);
  HWY_UNROLL(4) for (int m = M; m > 1; m /= 2) {
    HWY_UNROLL(4) for (int r = 0; r < m / 2; ++r) {
      p[r] = PairSum(d, p[2 * r], p[2 * r + 1]);
      q[r] = PairSum(d, q[2 * r], q[2 * r + 1]);
    }
  }
}
#endif

}  // namespace crossword::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // CROSSWORD_KERNELS_PAIR_SUM_INL_H_
