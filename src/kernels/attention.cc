// Flash-style attention (online softmax over chunks of 16 keys) for T queries of one sequence
// with an F16 or F32 KV cache, vectorized per Highway target, parallel over (token block, kv head).
// clang-format off
#include "kernels/hwy_config.h"  // must precede every Highway header
// clang-format on

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/fp16.h"
#include "kernels/kernels.h"
#include "kernels/ref.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"  // after highway.h
#include "kernels/pair_sum-inl.h"       // after highway.h
// clang-format on

#ifndef CROSSWORD_KERNELS_ATTENTION_CONSTANTS
#define CROSSWORD_KERNELS_ATTENTION_CONSTANTS
namespace crossword::kernels::detail {
constexpr int kKeyChunk = 16;  // keys converted to f32 and scored together
constexpr int kMaxQRows = 32;  // query rows (tokens x heads of one kv head) per task
constexpr int kMaxHeadDim = 512;
}  // namespace crossword::kernels::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace crossword::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {  // per-target helpers stay private to this file
using detail::kKeyChunk;
using detail::kMaxHeadDim;
using detail::kMaxQRows;

// dst[0, n) = the kv row at src (F16 or F32) as floats.
void LoadKvRow(const void* src, GgmlType type, int64_t n, float* HWY_RESTRICT dst) {
  const hn::ScalableTag<float> d;
  const int64_t N = hn::Lanes(d);
  int64_t i = 0;
  if (type == GgmlType::kF32) {
    std::copy(static_cast<const float*>(src), static_cast<const float*>(src) + n, dst);
    return;
  }
  const auto* h = static_cast<const hwy::float16_t*>(src);
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  for (; i + N <= n; i += N) hn::Store(hn::PromoteTo(d, hn::LoadU(dh, h + i)), d, dst + i);
  for (; i < n; ++i) dst[i] = F16ToF32(static_cast<const uint16_t*>(src)[i]);
}

float Dot(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = hn::Lanes(d);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    s0 = hn::MulAdd(hn::Load(d, a + i), hn::Load(d, b + i), s0);
    s1 = hn::MulAdd(hn::Load(d, a + i + N), hn::Load(d, b + i + N), s1);
  }
  for (; i + N <= n; i += N) s0 = hn::MulAdd(hn::Load(d, a + i), hn::Load(d, b + i), s0);
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

#if HWY_TARGET != HWY_SCALAR
// s[j] = q . kf_j for the chunk's kKeyChunk key rows (rows Dp floats apart, Dp a multiple of the
// lanes). Dot per key ends in a horizontal reduction (log2(lanes) dependent shuffle-and-add
// steps) and reloads q for every key; here q is loaded once per vector of columns for a lane
// count of keys, each key's products stay a vector, and one transpose-and-add tree
// (pair_sum-inl.h, shared with gdn.cc's RowsBlocked) leaves lane j holding key j's
// score. The same code runs for every query, so a row's bits do not depend on T.
HWY_INLINE void ChunkScores(const float* HWY_RESTRICT q, const float* HWY_RESTRICT kf, int64_t Dp,
                            float* HWY_RESTRICT s) {
  using DF = hn::ScalableTag<float>;
  const DF d;
  constexpr int kN = static_cast<int>(HWY_LANES(float));
  static_assert(kN >= 2 && (kN & (kN - 1)) == 0 && kKeyChunk % kN == 0);
  for (int j0 = 0; j0 < kKeyChunk; j0 += kN) {
    hn::Vec<DF> p[kN];
    HWY_UNROLL(16) for (int j = 0; j < kN; ++j) p[j] = hn::Zero(d);
    for (int64_t c = 0; c < Dp; c += kN) {
      const auto qv = hn::Load(d, q + c);
      HWY_UNROLL(16) for (int j = 0; j < kN; ++j) {
        p[j] = hn::MulAdd(qv, hn::Load(d, kf + (j0 + j) * Dp + c), p[j]);
      }
    }
    hn::Store(PairSumTree<kN>(d, p), d, s + j0);
  }
}
#endif

// Queries whose value sums run side by side (kQueryGroup), and the vectors of output columns
// each keeps in registers while a chunk's values are added (kValueTile): 4 x 4 accumulators.
constexpr int kQueryGroup = 4;
constexpr int kValueTile = 4;

// For each query q < QB: acc_q[0, NV lanes) = acc_q * corr_q + sum over keys j < nk of
// s_q[j] * vf_j (value rows Dp floats apart), the keys added in order. Every query's columns stay
// in registers across the keys, so each key costs NV loads shared by the QB queries, one broadcast
// per query, and QB x NV independent multiply-adds: one query's NV chains of nk dependent
// multiply-adds were latency-bound at the embedded model's NV = 2. Each accumulator sees the
// operations of a one-query call in the same order, so the bits do not depend on QB.
template <int QB, int NV>
HWY_INLINE void AccumulateValues(float* const* HWY_RESTRICT acc, const float* HWY_RESTRICT vf,
                                 int64_t Dp, const float* const* HWY_RESTRICT s, int nk,
                                 const float* HWY_RESTRICT corr, int64_t c) {
  using DF = hn::ScalableTag<float>;
  const DF d;
  const int64_t N = hn::Lanes(d);
  hn::Vec<DF> o[QB][NV];
  HWY_UNROLL(4) for (int q = 0; q < QB; ++q) {
    const auto vc = hn::Set(d, corr[q]);
    HWY_UNROLL(4)
    for (int v = 0; v < NV; ++v) o[q][v] = hn::Mul(hn::Load(d, acc[q] + c + v * N), vc);
  }
  for (int j = 0; j < nk; ++j) {
    const float* row = vf + j * Dp + c;
    hn::Vec<DF> x[NV];
    HWY_UNROLL(4) for (int v = 0; v < NV; ++v) x[v] = hn::Load(d, row + v * N);
    HWY_UNROLL(4) for (int q = 0; q < QB; ++q) {
      const auto sj = hn::Set(d, s[q][j]);
      HWY_UNROLL(4) for (int v = 0; v < NV; ++v) o[q][v] = hn::MulAdd(sj, x[v], o[q][v]);
    }
  }
  HWY_UNROLL(4) for (int q = 0; q < QB; ++q) {
    HWY_UNROLL(4) for (int v = 0; v < NV; ++v) hn::Store(o[q][v], d, acc[q] + c + v * N);
  }
}

// AccumulateValues<QB, NV> over all Dp columns: tiles of kValueTile vectors, then the rest.
template <int QB>
HWY_INLINE void AccumulateRow(float* const* acc, const float* vf, int64_t Dp, const float* const* s,
                              int nk, const float* corr) {
  const int64_t N = hn::Lanes(hn::ScalableTag<float>());
  int64_t c = 0;
  for (; c + kValueTile * N <= Dp; c += kValueTile * N) {
    AccumulateValues<QB, kValueTile>(acc, vf, Dp, s, nk, corr, c);
  }
  switch ((Dp - c) / N) {
    case 3:
      AccumulateValues<QB, 3>(acc, vf, Dp, s, nk, corr, c);
      break;
    case 2:
      AccumulateValues<QB, 2>(acc, vf, Dp, s, nk, corr, c);
      break;
    case 1:
      AccumulateValues<QB, 1>(acc, vf, Dp, s, nk, corr, c);
      break;
    default:
      break;
  }
}

// Queries of tokens [t0, t1) and the heads of kv head g.
void AttentionTask(const AttentionArgs& a, int64_t t0, int64_t t1, int g) {
  const hn::ScalableTag<float> d;
  const int64_t N = hn::Lanes(d);
  const int64_t D = a.head_dim;
  const int64_t Dp = (D + N - 1) / N * N;  // padded row length (pads stay zero)
  const int group = a.n_head / a.n_head_kv;
  const int nq = static_cast<int>(t1 - t0) * group;
  const int64_t qhs = a.q_head_stride ? a.q_head_stride : D;
  const int64_t ohs = a.out_head_stride ? a.out_head_stride : D;
  const float scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(D));

  // Rows Dp floats apart, not kMaxHeadDim: rows 2 KiB apart all fell into the same few L1 sets
  // (D 32: every row of the four buffers in 4 sets; D 256: 16 key rows in 32 sets of 8 ways).
  alignas(64) float q_buf[kMaxQRows * kMaxHeadDim];
  alignas(64) float acc_buf[kMaxQRows * kMaxHeadDim];
  alignas(64) float kf_buf[kKeyChunk * kMaxHeadDim];
  alignas(64) float vf_buf[kKeyChunk * kMaxHeadDim];
  const auto q = [&](int i) { return q_buf + i * Dp; };
  const auto acc = [&](int i) { return acc_buf + i * Dp; };
  const auto kf = [&](int j) { return kf_buf + j * Dp; };
  const auto vf = [&](int j) { return vf_buf + j * Dp; };
  alignas(64) float s[kQueryGroup][kKeyChunk];
  float m[kMaxQRows], l[kMaxQRows];
  int64_t kv_len[kMaxQRows];
  int64_t max_len = 0;
  for (int i = 0; i < nq; ++i) {
    const int64_t t = t0 + i / group;
    const int h = g * group + i % group;
    const float* src = a.q + t * a.ldq + h * qhs;
    for (int64_t j = 0; j < Dp; ++j) q(i)[j] = j < D ? src[j] * scale : 0.0f;
    std::fill(acc(i), acc(i) + Dp, 0.0f);
    m[i] = -INFINITY;
    l[i] = 0.0f;
    kv_len[i] = a.causal ? a.n_past + t + 1 : a.n_past + a.T;
    max_len = std::max(max_len, kv_len[i]);
  }
  // Zeros once: the pads past D stay zero, and ChunkScores reads every row of a chunk, also
  // those the last chunk leaves unloaded (their scores are never used).
  std::fill(kf_buf, kf_buf + kKeyChunk * Dp, 0.0f);
  std::fill(vf_buf, vf_buf + kKeyChunk * Dp, 0.0f);
  const size_t esize = a.kv_type == GgmlType::kF16 ? 2 : 4;
  const auto* kbase = static_cast<const uint8_t*>(a.k);
  const auto* vbase = static_cast<const uint8_t*>(a.v);

  for (int64_t p0 = 0; p0 < max_len; p0 += kKeyChunk) {
    const int n = static_cast<int>(std::min<int64_t>(kKeyChunk, max_len - p0));
    for (int j = 0; j < n; ++j) {
      const int64_t p = p0 + j;
      LoadKvRow(kbase + (p * a.ldk + g * D) * esize, a.kv_type, D, kf(j));
      LoadKvRow(vbase + (p * a.ldv + g * D) * esize, a.kv_type, D, vf(j));
    }
    // Queries in groups of kQueryGroup: each one's scores and softmax update, then the group's
    // value sums side by side when its queries attend to the same keys of this chunk (always in
    // a denoise pass; in a causal one all but the last chunks), else one query at a time.
    for (int i0 = 0; i0 < nq; i0 += kQueryGroup) {
      const int qb = std::min(kQueryGroup, nq - i0);
      int nks[kQueryGroup];
      float corrs[kQueryGroup];
      float* accs[kQueryGroup];
      const float* ss[kQueryGroup];
      bool same = true;
      for (int u = 0; u < qb; ++u) {
        const int i = i0 + u;
        const int nk = static_cast<int>(std::min<int64_t>(n, kv_len[i] - p0));
        nks[u] = nk;
        accs[u] = acc(i);
        ss[u] = s[u];
        same = same && nk == nks[0];
        if (nk <= 0) continue;
        float* su = s[u];
#if HWY_TARGET != HWY_SCALAR
        ChunkScores(q(i), kf_buf, Dp, su);
#else
        for (int j = 0; j < nk; ++j) su[j] = Dot(q(i), kf(j), Dp);
#endif
        // Lanes of the scores from su + j that hold one of the nk keys this query attends to.
        const auto valid = [&](int j) {
          return hn::Lt(hn::Iota(d, static_cast<float>(j)), hn::Set(d, static_cast<float>(nk)));
        };
        // The chunk's largest score: a vector maximum over the valid keys (a maximum is exact,
        // so the same value as a scalar loop; the scalar loop was a chain of nk dependent steps).
        float cmax = -INFINITY;
        for (int j = 0; j < nk; j += static_cast<int>(N)) {
          const auto v = hn::IfThenElse(valid(j), hn::Load(d, su + j), hn::Set(d, -INFINITY));
          cmax = std::max(cmax, hn::GetLane(hn::MaxOfLanes(d, v)));
        }
        const float m_new = std::max(m[i], cmax);
        // exp(m - m_new): 0 on the first chunk (m = -inf), and exactly 1 whenever a finite
        // maximum stayed (most chunks after the first), where the call is skipped: the same value.
        corrs[u] = std::isfinite(m[i]) && m_new == m[i] ? 1.0f : std::exp(m[i] - m_new);
        float psum = 0.0f;
        for (int j = 0; j < kKeyChunk; j += static_cast<int>(N)) {
          const auto e = hn::IfThenElseZero(
              valid(j), hn::Exp(d, hn::Sub(hn::Load(d, su + j), hn::Set(d, m_new))));
          hn::Store(e, d, su + j);
          psum += hn::GetLane(hn::SumOfLanes(d, e));
        }
        l[i] = l[i] * corrs[u] + psum;
        m[i] = m_new;
      }
      if (same && qb == kQueryGroup) {
        if (nks[0] > 0) AccumulateRow<kQueryGroup>(accs, vf_buf, Dp, ss, nks[0], corrs);
        continue;
      }
      for (int u = 0; u < qb; ++u) {
        if (nks[u] > 0) AccumulateRow<1>(accs + u, vf_buf, Dp, ss + u, nks[u], corrs + u);
      }
    }
  }
  for (int i = 0; i < nq; ++i) {
    const int64_t t = t0 + i / group;
    const int h = g * group + i % group;
    float* out = a.out + t * a.ldo + h * ohs;
    const float inv = 1.0f / l[i];
    for (int64_t j = 0; j < D; ++j) out[j] = acc(i)[j] * inv;
  }
}

}  // namespace
}  // namespace crossword::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace crossword::kernels {
HWY_EXPORT(AttentionTask);

void Attention(const AttentionArgs& args, ThreadPool& pool) {
  ref::CheckAttentionArgs(args);
  const int group = args.n_head / args.n_head_kv;
  Check(group <= detail::kMaxQRows, "Attention: {} query heads per kv head exceed the limit {}",
        group, detail::kMaxQRows);
  const int64_t tb = std::max(1, detail::kMaxQRows / group);  // tokens per task
  const int64_t n_tb = (args.T + tb - 1) / tb;
  // In the pool's units (int8 multiply-adds, 64 per instruction): the scores' and values' float
  // multiply-adds (2 head_dim per query head and attended position) at 4 each (16 per
  // instruction), plus per query head and 16-key chunk the maximum, exponentials and
  // transpose-and-add tree, ~250 cycles (measured: the embedded model's 32-row pass, 4 heads of
  // 32, 96 positions, took 61 us on one thread for 768 query-chunks), as 16,384.
  const int64_t positions = args.n_past + args.T;
  const int64_t chunks =
      args.T * args.n_head * ((positions + detail::kKeyChunk - 1) / detail::kKeyChunk);
  const int64_t work = 4 * 2 * args.T * positions * args.n_head * args.head_dim + 16384 * chunks;
  pool.ParallelFor(n_tb * args.n_head_kv, work, [&](int64_t task, int) {
    const int64_t t0 = (task / args.n_head_kv) * tb;
    const int g = static_cast<int>(task % args.n_head_kv);
    HWY_DYNAMIC_DISPATCH(AttentionTask)(args, t0, std::min(args.T, t0 + tb), g);
  });
}

void AttentionRows(const AttentionArgs& args, int64_t t0, int64_t t1) {
  ref::CheckAttentionArgs(args);
  Check(t0 >= 0 && t0 <= t1 && t1 <= args.T, "AttentionRows: tokens [{}, {}) outside [0, {}]", t0,
        t1, args.T);
  const int group = args.n_head / args.n_head_kv;
  Check(group <= detail::kMaxQRows, "Attention: {} query heads per kv head exceed the limit {}",
        group, detail::kMaxQRows);
  const int64_t tb = std::max(1, detail::kMaxQRows / group);
  for (int64_t a = t0; a < t1; a += tb) {
    for (int g = 0; g < args.n_head_kv; ++g)
      HWY_DYNAMIC_DISPATCH(AttentionTask)(args, a, std::min(t1, a + tb), g);
  }
}

}  // namespace crossword::kernels
#endif  // HWY_ONCE
