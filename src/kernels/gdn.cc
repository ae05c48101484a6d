// Gated delta rule (Gated DeltaNet recurrence), vectorized per Highway target, parallel over
// v-heads: the token-by-token form (llama.cpp's fused CPU op) and the chunked WY form of
// transformers' torch_chunk_gated_delta_rule (chunks of 64) for long prompts.
// clang-format off
#include "kernels/hwy_config.h"  // must precede every Highway header
// clang-format on

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/error.h"
#include "kernels/kernels.h"
#include "kernels/ref.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/gdn.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/pair_sum-inl.h"  // after highway.h
// clang-format on

#ifndef CROSSWORD_KERNELS_GDN_CONSTANTS
#define CROSSWORD_KERNELS_GDN_CONSTANTS
namespace crossword::kernels::detail {
constexpr int kGdnChunk = 64;
constexpr int64_t kGdnChunkMaxDim = 128;  // chunked form scratch is sized for dk, dv <= 128
}  // namespace crossword::kernels::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace crossword::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {  // per-target helpers stay private to this file
using detail::kGdnChunk;
using detail::kGdnChunkMaxDim;
using DF = hn::ScalableTag<float>;

// Two dot products of one row with a and b (the row is read once).
HWY_INLINE void Dot2(const float* HWY_RESTRICT row, const float* HWY_RESTRICT a,
                     const float* HWY_RESTRICT b, int64_t n, float* da, float* db) {
  const DF d;
  const int64_t N = hn::Lanes(d);
  auto sa = hn::Zero(d), sb = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto r = hn::LoadU(d, row + i);
    sa = hn::MulAdd(r, hn::LoadU(d, a + i), sa);
    sb = hn::MulAdd(r, hn::LoadU(d, b + i), sb);
  }
  float x = hn::GetLane(hn::SumOfLanes(d, sa)), y = hn::GetLane(hn::SumOfLanes(d, sb));
  for (; i < n; ++i) {
    x += row[i] * a[i];
    y += row[i] * b[i];
  }
  *da = x;
  *db = y;
}

float Dot(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int64_t n) {
  const DF d;
  const int64_t N = hn::Lanes(d);
  auto s = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) s = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s);
  float r = hn::GetLane(hn::SumOfLanes(d, s));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

// y = y * s + a * x  (s = 1: axpy).
HWY_INLINE void ScaleAxpy(float* HWY_RESTRICT y, float s, float a, const float* HWY_RESTRICT x,
                          int64_t n) {
  const DF d;
  const int64_t N = hn::Lanes(d);
  const auto vs = hn::Set(d, s), va = hn::Set(d, a);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::MulAdd(hn::LoadU(d, x + i), va, hn::Mul(hn::LoadU(d, y + i), vs)), d, y + i);
  }
  for (; i < n; ++i) y[i] = y[i] * s + a * x[i];
}

#if HWY_TARGET != HWY_SCALAR
// The row loop for short rows (dk = V * lanes, V <= 2; the embedded model's dk = 32 on AVX-512),
// `lanes` rows at a time. RowsFixed finishes both dot products of every row with a horizontal
// reduction (log2(lanes) dependent shuffle-and-add steps each), which is most of its work when a
// row is one or two vectors. Here each row's products stay vectors until the group is complete;
// one transpose-and-add tree (ConcatEven + ConcatOdd + Add per pair of vectors, lanes - 1 pairs
// per tree) then leaves lane r holding row r's sum, in row order, so d and o are computed for the
// whole group at once and the rows are updated from L1 (the state of a small head, dk dv floats,
// stays there). Requires dv % lanes == 0. The same code runs for every T, so a pass of T rows
// keeps the AR step's bits.
template <int V>
HWY_INLINE void RowsBlocked(float* HWY_RESTRICT S, const float* HWY_RESTRICT q,
                            const float* HWY_RESTRICT k, const float* HWY_RESTRICT v, float* o,
                            int64_t dv, float decay, float beta, float kq, float scale) {
  static_assert(V == 1 || V == 2);
  const DF d;
  constexpr int kN = static_cast<int>(HWY_LANES(float));
  static_assert(kN >= 2 && (kN & (kN - 1)) == 0);
  hn::Vec<DF> kv[V], qv[V];
  HWY_UNROLL(2) for (int i = 0; i < V; ++i) {
    kv[i] = hn::LoadU(d, k + i * kN);
    qv[i] = hn::LoadU(d, q + i * kN);
  }
  const auto vdecay = hn::Set(d, decay), vbeta = hn::Set(d, beta);
  const auto vkq = hn::Set(d, kq), vscale = hn::Set(d, scale);
  alignas(64) float dj[kN];
  for (int64_t j0 = 0; j0 < dv; j0 += kN) {
    float* rows = S + j0 * V * kN;
    // Rows are paired (PairSum) as they are read, so at most kN/2 vectors per sum are live.
    hn::Vec<DF> sk[kN / 2], sq[kN / 2];
    HWY_UNROLL(8) for (int r = 0; r < kN; r += 2) {
      hn::Vec<DF> pk[2], pq[2];
      HWY_UNROLL(2) for (int h = 0; h < 2; ++h) {
        const float* row = rows + (r + h) * V * kN;
        const auto r0 = hn::LoadU(d, row);
        pk[h] = hn::Mul(r0, kv[0]);
        pq[h] = hn::Mul(r0, qv[0]);
        if constexpr (V == 2) {
          const auto r1 = hn::LoadU(d, row + kN);
          pk[h] = hn::MulAdd(r1, kv[1], pk[h]);
          pq[h] = hn::MulAdd(r1, qv[1], pq[h]);
        }
      }
      sk[r / 2] = PairSum(d, pk[0], pk[1]);
      sq[r / 2] = PairSum(d, pq[0], pq[1]);
    }
    PairSumTrees<kN / 2>(d, sk, sq);
    // d = (v - decay * S.k) * beta;  o = scale * (decay * S.q + d * k.q)
    const auto vd = hn::Mul(hn::NegMulAdd(vdecay, sk[0], hn::LoadU(d, v + j0)), vbeta);
    hn::StoreU(hn::Mul(vscale, hn::MulAdd(vd, vkq, hn::Mul(vdecay, sq[0]))), d, o + j0);
    hn::Store(vd, d, dj);
    HWY_UNROLL(16) for (int r = 0; r < kN; ++r) {
      float* row = rows + r * V * kN;
      const auto vdj = hn::Set(d, dj[r]);
      HWY_UNROLL(2) for (int i = 0; i < V; ++i) {
        hn::StoreU(hn::MulAdd(kv[i], vdj, hn::Mul(hn::LoadU(d, row + i * kN), vdecay)), d,
                   row + i * kN);
      }
    }
  }
}
#endif

// Row loop with k and q held in V registers each (dk == V * lanes): one load and one store of
// the state row per token, nothing else touches memory.
template <int V>
HWY_INLINE void RowsFixed(float* HWY_RESTRICT S, const float* HWY_RESTRICT q,
                          const float* HWY_RESTRICT k, const float* HWY_RESTRICT v, float* o,
                          int64_t dv, float decay, float beta, float kq, float scale) {
  const DF d;
  const int64_t N = hn::Lanes(d);
  hn::Vec<DF> kv[V], qv[V];
  // Fully unrolled (GCC -O2 would otherwise keep kv/qv on the stack), two accumulators per dot
  // product to halve the dependent multiply-add chains.
  HWY_UNROLL(8) for (int i = 0; i < V; ++i) {
    kv[i] = hn::LoadU(d, k + i * N);
    qv[i] = hn::LoadU(d, q + i * N);
  }
  const auto vdecay = hn::Set(d, decay);
  for (int64_t j = 0; j < dv; ++j) {
    float* row = S + j * V * N;
    hn::Vec<DF> r[V];
    auto sk0 = hn::Zero(d), sq0 = hn::Zero(d), sk1 = hn::Zero(d), sq1 = hn::Zero(d);
    HWY_UNROLL(8) for (int i = 0; i < V; i += 2) {
      r[i] = hn::LoadU(d, row + i * N);
      r[i + 1] = hn::LoadU(d, row + (i + 1) * N);
      sk0 = hn::MulAdd(r[i], kv[i], sk0);
      sq0 = hn::MulAdd(r[i], qv[i], sq0);
      sk1 = hn::MulAdd(r[i + 1], kv[i + 1], sk1);
      sq1 = hn::MulAdd(r[i + 1], qv[i + 1], sq1);
    }
    const float dj = (v[j] - decay * hn::GetLane(hn::SumOfLanes(d, hn::Add(sk0, sk1)))) * beta;
    const auto vdj = hn::Set(d, dj);
    HWY_UNROLL(8) for (int i = 0; i < V; ++i) {
      hn::StoreU(hn::MulAdd(kv[i], vdj, hn::Mul(r[i], vdecay)), d, row + i * N);
    }
    o[j] = scale * (decay * hn::GetLane(hn::SumOfLanes(d, hn::Add(sq0, sq1))) + dj * kq);
  }
}

// Tokens [t0, t1) of v-head hv, token by token, on the [dv][dk] state. Per token and value row
// j: a = S_j.k, b = S_j.q (old state); d = (v_j - decay*a) * beta; S_j = decay*S_j + d*k;
// o_j = scale * (decay*b + d * k.q)  — the update written out once per row.
void RecurrentHead(const GdnArgs& a, int hv, int64_t t0, int64_t t1, float scale) {
  const int hk = hv % a.n_k_heads;
  const int64_t dk = a.dk, dv = a.dv;
  const int64_t N = hn::Lanes(DF());
  float* S = a.state + static_cast<int64_t>(hv) * dv * dk;
  for (int64_t t = t0; t < t1; ++t) {
    const float* q = a.q + t * a.ldq + hk * dk;
    const float* k = a.k + t * a.ldk + hk * dk;
    const float* v = a.v + t * a.ldv + hv * dv;
    float* o = a.out + t * a.ldo + hv * dv;
    const float decay = std::exp(a.g[t * a.ldg + hv]);
    const float beta = a.beta[t * a.ldg + hv];
    const float kq = Dot(k, q, dk);
    if (dk == 8 * N) {  // Clover's 128 on AVX-512
      RowsFixed<8>(S, q, k, v, o, dv, decay, beta, kq, scale);
    } else if (dk == 4 * N) {
      RowsFixed<4>(S, q, k, v, o, dv, decay, beta, kq, scale);
#if HWY_TARGET != HWY_SCALAR
    } else if (dk == 2 * N && dv % N == 0) {
      RowsBlocked<2>(S, q, k, v, o, dv, decay, beta, kq, scale);
    } else if (dk == N && dv % N == 0) {
      RowsBlocked<1>(S, q, k, v, o, dv, decay, beta, kq, scale);
#endif
    } else {
      for (int64_t j = 0; j < dv; ++j) {
        float* row = S + j * dk;
        float sk, sq;
        Dot2(row, k, q, dk, &sk, &sq);
        const float dj = (v[j] - decay * sk) * beta;
        ScaleAxpy(row, decay, dj, k, dk);
        o[j] = scale * (decay * sq + dj * kq);
      }
    }
    const int64_t slot = a.T - 1 - t;
    if (slot < a.n_snapshots) {
      std::copy(S, S + dv * dk, a.snapshots + (slot * a.n_v_heads + hv) * dv * dk);
    }
  }
}

// Tokens [0, t_end) of v-head hv in chunks of 64 (transformers' torch_chunk_gated_delta_rule,
// with the state kept transposed as Sh[i][j] = S[j][i] during the call).
void ChunkedHead(const GdnArgs& a, int hv, int64_t t_end, float scale) {
  constexpr int C = kGdnChunk;
  constexpr int64_t M = kGdnChunkMaxDim;
  const int hk = hv % a.n_k_heads;
  const int64_t dk = a.dk, dv = a.dv;
  float* S = a.state + static_cast<int64_t>(hv) * dv * dk;
  alignas(64) float Sh[M][M];    // [dk][dv]
  alignas(64) float kb[C][M];    // k * beta, later k * beta * exp(gcs) ([dk])
  alignas(64) float val[C][M];   // v * beta, then T @ (v * beta), then v_new ([dv])
  alignas(64) float kcum[C][M];  // T @ (k * beta * exp(gcs)) ([dk])
  alignas(64) float A[C][C];     // strictly lower: -(kb k^T) * decay, then T - I
  alignas(64) float tmp[M];
  float gcs[C];
  for (int64_t i = 0; i < dk; ++i) {
    for (int64_t j = 0; j < dv; ++j) Sh[i][j] = S[j * dk + i];
  }
  for (int64_t c0 = 0; c0 < t_end; c0 += C) {
    const int L = static_cast<int>(std::min<int64_t>(C, t_end - c0));
    auto K = [&](int c) { return a.k + (c0 + c) * a.ldk + hk * dk; };
    auto Q = [&](int c) { return a.q + (c0 + c) * a.ldq + hk * dk; };
    float acc = 0.0f;
    for (int c = 0; c < L; ++c) {
      acc += a.g[(c0 + c) * a.ldg + hv];
      gcs[c] = acc;
      const float beta = a.beta[(c0 + c) * a.ldg + hv];
      const float* k = K(c);
      const float* v = a.v + (c0 + c) * a.ldv + hv * dv;
      for (int64_t i = 0; i < dk; ++i) kb[c][i] = k[i] * beta;
      for (int64_t j = 0; j < dv; ++j) val[c][j] = v[j] * beta;
    }
    for (int c = 0; c < L; ++c) {
      for (int m = 0; m < c; ++m) A[c][m] = -Dot(kb[c], K(m), dk) * std::exp(gcs[c] - gcs[m]);
    }
    // Forward substitution, row by row: A[c][m] += sum_{m<p<c} A[c][p] * A[p][m] (rows p < c
    // already final, row c's own entries as they were before this row's update).
    for (int c = 1; c < L; ++c) {
      float row[C];
      for (int m = 0; m < c; ++m) row[m] = A[c][m];
      for (int m = 0; m < c; ++m) {
        float s = 0.0f;
        for (int p = m + 1; p < c; ++p) s += row[p] * A[p][m];
        A[c][m] = row[m] + s;
      }
    }
    // val = (A + I) @ (v * beta);  kcum = (A + I) @ (k * beta * exp(gcs)). Rows from the bottom
    // so the inputs of smaller rows are still unmodified.
    for (int c = 0; c < L; ++c) {
      const float e = std::exp(gcs[c]);
      for (int64_t i = 0; i < dk; ++i) kb[c][i] *= e;
    }
    for (int c = L - 1; c >= 0; --c) {
      std::copy(kb[c], kb[c] + dk, kcum[c]);
      for (int m = 0; m < c; ++m) {
        ScaleAxpy(val[c], 1.0f, A[c][m], val[m], dv);
        ScaleAxpy(kcum[c], 1.0f, A[c][m], kb[m], dk);
      }
    }
    // v_new = val - kcum @ Sh;  out = (q * exp(gcs)) @ Sh + tril(q k^T * decay) @ v_new.
    for (int c = 0; c < L; ++c) {
      for (int64_t i = 0; i < dk; ++i) ScaleAxpy(val[c], 1.0f, -kcum[c][i], Sh[i], dv);
    }
    for (int c = 0; c < L; ++c) {
      const float* q = Q(c);
      const float eq = std::exp(gcs[c]) * scale;
      std::fill(tmp, tmp + dv, 0.0f);
      for (int64_t i = 0; i < dk; ++i) ScaleAxpy(tmp, 1.0f, q[i] * eq, Sh[i], dv);
      for (int m = 0; m <= c; ++m) {
        const float w = Dot(q, K(m), dk) * std::exp(gcs[c] - gcs[m]) * scale;
        ScaleAxpy(tmp, 1.0f, w, val[m], dv);
      }
      std::copy(tmp, tmp + dv, a.out + (c0 + c) * a.ldo + hv * dv);
    }
    // Sh = Sh * exp(g_last) + sum_c (k_c * exp(g_last - gcs_c))^T v_new_c.
    const float g_last = gcs[L - 1];
    const float e_last = std::exp(g_last);
    for (int c = 0; c < L; ++c) {
      const float* k = K(c);
      const float w = std::exp(g_last - gcs[c]);
      for (int64_t i = 0; i < dk; ++i) {
        ScaleAxpy(Sh[i], c == 0 ? e_last : 1.0f, k[i] * w, val[c], dv);
      }
    }
  }
  for (int64_t j = 0; j < dv; ++j) {
    for (int64_t i = 0; i < dk; ++i) S[j * dk + i] = Sh[i][j];
  }
}

void GdnHead(const GdnArgs& a, int hv, bool chunked, float scale) {
  // Snapshot tokens (the last n_snapshots) always run token by token.
  const int64_t tail = std::min<int64_t>(a.T, a.n_snapshots);
  int64_t t0 = 0;
  if (chunked && a.T - tail > 0) {
    ChunkedHead(a, hv, a.T - tail, scale);
    t0 = a.T - tail;
  }
  RecurrentHead(a, hv, t0, a.T, scale);
}

}  // namespace

// PairSumTreeForTest's per-target body: x holds lanes vectors of lanes floats; out gets the tree's
// one vector (the scalar target: its single lane).
int64_t PairSumTreeImpl(const float* HWY_RESTRICT x, float* HWY_RESTRICT out) {
  const DF d;
  constexpr int kN = static_cast<int>(HWY_LANES(float));
#if HWY_TARGET != HWY_SCALAR
  hn::Vec<DF> p[kN];
  for (int r = 0; r < kN; ++r) p[r] = hn::LoadU(d, x + r * kN);
  hn::StoreU(PairSumTree<kN>(d, p), d, out);
#else
  hn::StoreU(hn::LoadU(d, x), d, out);
#endif
  return kN;
}

}  // namespace crossword::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace crossword::kernels {
HWY_EXPORT(GdnHead);
HWY_EXPORT(PairSumTreeImpl);

int64_t detail::PairSumTreeForTest(const float* x, float* out) {
  return HWY_DYNAMIC_DISPATCH(PairSumTreeImpl)(x, out);
}

namespace {
// Whether args run in the chunked form (checked), and the query scale.
std::pair<bool, float> GdnForm(const GdnArgs& args) {
  ref::CheckGdnArgs(args);
  const bool fits = args.dk <= detail::kGdnChunkMaxDim && args.dv <= detail::kGdnChunkMaxDim;
  bool chunked = false;
  switch (args.mode) {
    case GdnMode::kAuto:
      chunked = fits && args.T >= kGdnChunkThreshold;
      break;
    case GdnMode::kChunked:
      Check(fits, "GatedDeltaRule: the chunked form supports dk, dv <= {} (got {}, {})",
            detail::kGdnChunkMaxDim, args.dk, args.dv);
      chunked = true;
      break;
    case GdnMode::kRecurrent:
      break;
  }
  return {chunked, args.scale != 0.0f ? args.scale : 1.0f / std::sqrt(static_cast<float>(args.dk))};
}
}  // namespace

void GatedDeltaRuleHead(const GdnArgs& args, int hv) {
  const auto [chunked, scale] = GdnForm(args);
  Check(hv >= 0 && hv < args.n_v_heads, "GatedDeltaRuleHead: head {} outside [0, {})", hv,
        args.n_v_heads);
  HWY_DYNAMIC_DISPATCH(GdnHead)(args, hv, chunked, scale);
}

void GatedDeltaRule(const GdnArgs& args, ThreadPool& pool) {
  // Plain locals, not a structured binding: clang 14 (the fuzz build) rejects a lambda capturing
  // a binding, which C++20 allows only from clang 16.
  const std::pair<bool, float> form = GdnForm(args);
  const bool chunked = form.first;
  const float scale = form.second;
  // Per token and head: the state's dk x dv read, decayed, updated and read out (~4 dk dv float
  // multiply-adds), at 2 pool units each: calibrated so that the embedded model's 4 heads of 32 x
  // 32 split over both threads from 32 tokens on (1.05M units), not at 16 (bench --sweep, 2
  // threads, 10 alternated runs each: denoise32 0.649 -> 0.611 ms split; verify16 0.358 either
  // way, and in one of the VM's slow periods a split 16-row GDN core ran 2.5x slower).
  const int64_t work = 8 * args.T * args.n_v_heads * args.dk * args.dv;
  pool.ParallelFor(args.n_v_heads, work, [&](int64_t hv, int) {
    HWY_DYNAMIC_DISPATCH(GdnHead)(args, static_cast<int>(hv), chunked, scale);
  });
}

}  // namespace crossword::kernels
#endif  // HWY_ONCE
