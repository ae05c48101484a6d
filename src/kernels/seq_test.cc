// Attention and the gated delta rule on every compiled+supported Highway target against the
// scalar twins (double accumulation), plus state-carrying and chunked-vs-recurrent checks.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/fp16.h"
#include "kernels/kernels.h"
#include "kernels/ref.h"

namespace crossword::kernels {
namespace {

struct TargetGuard {
  ~TargetGuard() { ForceTargetForTest(0); }
};

std::vector<float> Random(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// The values as F16 (a KV cache's rows).
std::vector<uint16_t> ToF16(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = F32ToF16(x[i]);
  return h;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double{a[i]} - b[i]));
  return m;
}

struct AttnCase {
  int64_t T, n_past;
  int n_head, n_head_kv;
  int64_t head_dim;
  bool causal;
  GgmlType kv_type;
};

TEST(Attention, MatchesTwinOnEveryTarget) {
  TargetGuard guard;
  ThreadPool pool(2);
  const AttnCase cases[] = {
      {1, 37, 4, 2, 64, true, GgmlType::kF16},    {5, 20, 4, 2, 64, true, GgmlType::kF32},
      {7, 3, 4, 1, 80, false, GgmlType::kF16},    {3, 40, 16, 2, 256, true, GgmlType::kF16},
      {32, 0, 16, 2, 256, false, GgmlType::kF16}, {9, 0, 2, 2, 24, true, GgmlType::kF32},
  };
  uint32_t seed = 1;
  for (const AttnCase& c : cases) {
    const int64_t n_kv = c.n_past + c.T;
    const int64_t q_head_stride = c.head_dim * 2;  // queries interleaved with gates, as Clover's
    const int64_t ldq = c.n_head * q_head_stride, ldk = c.n_head_kv * c.head_dim;
    const int64_t ldo = c.n_head * c.head_dim + 5;
    const auto q = Random(c.T * ldq, -1.0f, 1.0f, seed++);
    auto kf = Random(n_kv * ldk, -1.0f, 1.0f, seed++);
    auto vf = Random(n_kv * ldk, -1.0f, 1.0f, seed++);
    kf[3] = 6.0f;  // one sharp score
    const std::vector<uint16_t> kh = ToF16(kf), vh = ToF16(vf);
    const bool f16 = c.kv_type == GgmlType::kF16;
    AttentionArgs args;
    args.q = q.data();
    args.ldq = ldq;
    args.q_head_stride = q_head_stride;
    args.k = f16 ? static_cast<const void*>(kh.data()) : kf.data();
    args.v = f16 ? static_cast<const void*>(vh.data()) : vf.data();
    args.kv_type = c.kv_type;
    args.ldk = args.ldv = ldk;
    args.ldo = ldo;
    args.T = c.T;
    args.n_past = c.n_past;
    args.n_head = c.n_head;
    args.n_head_kv = c.n_head_kv;
    args.head_dim = c.head_dim;
    args.causal = c.causal;
    std::vector<float> want(c.T * ldo, 7.0f);
    args.out = want.data();
    ref::Attention(args);
    for (int64_t target : AvailableTargets()) {
      ForceTargetForTest(target);
      std::vector<float> got(c.T * ldo, 7.0f);
      args.out = got.data();
      Attention(args, pool);
      // |v| <= 1: float accumulation over <= 80 keys and the online rescaling stay ~1e-6.
      EXPECT_LT(MaxAbsDiff(got, want), 1e-5)
          << TargetName(target) << " T " << c.T << " n_past " << c.n_past << " D " << c.head_dim;
      EXPECT_EQ(got[c.n_head * c.head_dim], 7.0f) << "wrote into the row padding";
    }
  }
}

// A verify pass must give each of its rows the bits the AR step at that position gets: a causal
// T-row call equals T one-row calls over the same cache, bit for bit, on every target (Clover's
// 16 / 2 heads x 256 and the embedded model's 4 / 2 x 32; the T-row call spans several tasks).
TEST(Attention, CausalRowsAreBatchInvariant) {
  TargetGuard guard;
  ThreadPool pool(2);
  for (const auto& [n_head, n_head_kv, D] : {std::tuple{16, 2, 256}, std::tuple{4, 2, 32}}) {
    const int64_t T = 9, n_past = 37, n_kv = n_past + T;
    const int64_t ldq = n_head * D, ldk = n_head_kv * D, ldo = n_head * D;
    const auto q = Random(T * ldq, -1.0f, 1.0f, 11);
    const auto kf = Random(n_kv * ldk, -1.0f, 1.0f, 12), vf = Random(n_kv * ldk, -1.0f, 1.0f, 13);
    const std::vector<uint16_t> kh = ToF16(kf), vh = ToF16(vf);
    AttentionArgs a;
    a.ldq = ldq;
    a.k = kh.data();
    a.v = vh.data();
    a.kv_type = GgmlType::kF16;
    a.ldk = a.ldv = ldk;
    a.ldo = ldo;
    a.n_head = n_head;
    a.n_head_kv = n_head_kv;
    a.head_dim = D;
    for (int64_t target : AvailableTargets()) {
      ForceTargetForTest(target);
      std::vector<float> all(T * ldo), one(ldo);
      a.q = q.data();
      a.out = all.data();
      a.T = T;
      a.n_past = n_past;
      Attention(a, pool);
      for (int64_t t = 0; t < T; ++t) {
        a.q = q.data() + t * ldq;
        a.out = one.data();
        a.T = 1;
        a.n_past = n_past + t;
        Attention(a, pool);
        for (int64_t j = 0; j < ldo; ++j) {
          ASSERT_EQ(one[j], all[t * ldo + j])
              << TargetName(target) << " D " << D << " row " << t << " column " << j;
        }
      }
    }
  }
}

// AttentionRows (a pipelined row block's queries) gives each row the bits of the whole call, for
// causal and bidirectional blocks, F16 and F32 caches, cut anywhere; and rejects a bad range.
TEST(Attention, RowsOfACallGiveItsBits) {
  TargetGuard guard;
  ThreadPool pool(2);
  const int64_t T = 21, n_past = 19, n_kv = n_past + T;
  const int n_head = 4, n_head_kv = 2;
  const int64_t D = 32, ldq = n_head * D, ldk = n_head_kv * D, ldo = n_head * D;
  const auto q = Random(T * ldq, -1.0f, 1.0f, 21);
  const auto kf = Random(n_kv * ldk, -1.0f, 1.0f, 22), vf = Random(n_kv * ldk, -1.0f, 1.0f, 23);
  const std::vector<uint16_t> kh = ToF16(kf), vh = ToF16(vf);
  for (const GgmlType type : {GgmlType::kF16, GgmlType::kF32}) {
    for (const bool causal : {true, false}) {
      AttentionArgs a;
      a.q = q.data();
      a.ldq = ldq;
      a.k = type == GgmlType::kF16 ? static_cast<const void*>(kh.data()) : kf.data();
      a.v = type == GgmlType::kF16 ? static_cast<const void*>(vh.data()) : vf.data();
      a.kv_type = type;
      a.ldk = a.ldv = ldk;
      a.ldo = ldo;
      a.T = T;
      a.n_past = n_past;
      a.n_head = n_head;
      a.n_head_kv = n_head_kv;
      a.head_dim = D;
      a.causal = causal;
      for (int64_t target : AvailableTargets()) {
        ForceTargetForTest(target);
        std::vector<float> all(T * ldo), parts(T * ldo, -1.0f);
        a.out = all.data();
        Attention(a, pool);
        a.out = parts.data();
        for (const auto& [t0, t1] : {std::pair<int64_t, int64_t>{0, 5}, {5, 6}, {6, 21}})
          AttentionRows(a, t0, t1);
        ASSERT_EQ(std::memcmp(all.data(), parts.data(), all.size() * sizeof(float)), 0)
            << TargetName(target) << (causal ? " causal" : " bidirectional");
      }
      EXPECT_THROW(AttentionRows(a, 3, 22), Error);
      EXPECT_THROW(AttentionRows(a, 4, 3), Error);
    }
  }
}

TEST(Attention, RejectsBadArguments) {
  ThreadPool pool(1);
  std::vector<float> buf(4096);
  AttentionArgs a;
  a.q = a.out = buf.data();
  a.k = a.v = buf.data();
  a.kv_type = GgmlType::kF32;
  a.n_head = 3;
  a.n_head_kv = 2;  // not a divisor
  a.head_dim = 8;
  a.ldk = a.ldv = 16;
  EXPECT_THROW(Attention(a, pool), Error);
  a.n_head = 4;
  a.kv_type = GgmlType::kQ8_0;
  EXPECT_THROW(Attention(a, pool), Error);
}

// Inputs of a GDN layer: unit-norm q, k per k-head; slow decays g in [-0.2, 0) and keys that
// share a common direction (dot products ~0.5), so the chunked form's triangular solve and
// the long memory of the state matter; beta in (0, 1).
struct GdnData {
  int64_t T;
  int nk, nv;
  int64_t dk, dv;
  std::vector<float> q, k, v, g, beta, state;
  GdnData(int64_t T_, int nk_, int nv_, int64_t dk_, int64_t dv_, uint32_t seed)
      : T(T_), nk(nk_), nv(nv_), dk(dk_), dv(dv_) {
    q = Random(T * nk * dk, -1.0f, 1.0f, seed);
    k = Random(T * nk * dk, -1.0f, 1.0f, seed + 1);
    for (int64_t r = 0; r < T * nk; ++r) {
      for (int64_t i = 0; i < dk; ++i) k[r * dk + i] += (i % 3 == 0) ? 1.0f : 0.0f;
    }
    for (auto* x : {&q, &k}) {
      for (int64_t r = 0; r < T * nk; ++r) ref::L2Norm(x->data() + r * dk, dk, 1e-6f);
    }
    v = Random(T * nv * dv, -1.0f, 1.0f, seed + 2);
    g = Random(T * nv, -0.2f, -0.001f, seed + 3);
    beta = Random(T * nv, 0.05f, 0.95f, seed + 4);
    state = Random(nv * dv * dk, -0.5f, 0.5f, seed + 5);
  }
  GdnArgs Args(float* st, float* out, int64_t t0, int64_t n) const {
    GdnArgs a;
    a.T = n;
    a.n_k_heads = nk;
    a.n_v_heads = nv;
    a.dk = dk;
    a.dv = dv;
    a.q = q.data() + t0 * nk * dk;
    a.k = k.data() + t0 * nk * dk;
    a.ldq = a.ldk = nk * dk;
    a.v = v.data() + t0 * nv * dv;
    a.ldv = nv * dv;
    a.g = g.data() + t0 * nv;
    a.beta = beta.data() + t0 * nv;
    a.ldg = nv;
    a.state = st;
    a.out = out + t0 * nv * dv;
    a.ldo = nv * dv;
    return a;
  }
};

// The pair-sum tree (pair_sum-inl.h) of GDN's short-row loop and attention's key chunks gives, on
// every target, exactly the balanced sum of each vector's lanes, ((x0 + x1) + (x2 + x3)) + ...,
// in row order: the AVX-512 and AVX2 shuffles reach the same bits as the generic permutes, so a
// row's GDN and attention bits do not depend on which of them ran. Values spread over many
// magnitudes make any other order of the additions round differently.
TEST(PairSum, TreeIsTheBalancedSumOfEachVectorOnEveryTarget) {
  TargetGuard guard;
  std::function<float(const float*, int)> balanced = [&](const float* x, int n) {
    return n == 1 ? x[0] : balanced(x, n / 2) + balanced(x + n / 2, n / 2);
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-20, 20);
  for (int64_t target : AvailableTargets()) {
    ForceTargetForTest(target);
    SCOPED_TRACE(TargetName(target));
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<float> x(16 * 16), out(16, 0.0f);
      for (float& v : x) v = std::ldexp(mant(rng), expo(rng));
      const int64_t n = detail::PairSumTreeForTest(x.data(), out.data());
      ASSERT_TRUE(n >= 1 && n <= 16 && (n & (n - 1)) == 0) << n;
      for (int64_t r = 0; r < n; ++r) {
        const float want = balanced(x.data() + r * n, static_cast<int>(n));
        ASSERT_EQ(std::bit_cast<uint32_t>(out[r]), std::bit_cast<uint32_t>(want))
            << "vector " << r << " of " << n << ": " << out[r] << " vs " << want;
      }
    }
  }
}

TEST(GatedDeltaRule, RecurrentAndChunkedMatchTwinOnEveryTarget) {
  TargetGuard guard;
  ThreadPool pool(2);
  // Head sizes reach every row loop on some target: 128 (8 or 4 vectors per row, or the
  // generic loop), 40 (generic), 32 and 16 (the short-row blocked loop on AVX-512 and AVX2),
  // and dv != dk (64 value rows of 32).
  for (const auto& [T, dk, dv] : {std::tuple<int64_t, int64_t, int64_t>{1, 128, 128},
                                  {5, 128, 128},
                                  {150, 128, 128},
                                  {70, 40, 40},
                                  {1, 32, 32},
                                  {33, 32, 32},
                                  {9, 16, 16},
                                  {12, 32, 64}}) {
    const GdnData d(T, 2, 4, dk, dv, static_cast<uint32_t>(T + dk + dv));
    std::vector<float> want_out(T * d.nv * d.dv), want_state = d.state;
    std::vector<float> want_snap(3 * d.nv * d.dv * d.dk, 0.0f);
    GdnArgs ra = d.Args(want_state.data(), want_out.data(), 0, T);
    ra.snapshots = want_snap.data();
    ra.n_snapshots = 3;
    ref::GatedDeltaRule(ra);
    for (int64_t target : AvailableTargets()) {
      ForceTargetForTest(target);
      for (GdnMode mode : {GdnMode::kRecurrent, GdnMode::kChunked}) {
        SCOPED_TRACE(testing::Message()
                     << TargetName(target) << " T " << T << " dk " << dk << " dv " << dv
                     << (mode == GdnMode::kChunked ? " chunked" : " recurrent"));
        std::vector<float> out(want_out.size()), state = d.state;
        std::vector<float> snap(want_snap.size(), 0.0f);
        GdnArgs a = d.Args(state.data(), out.data(), 0, T);
        a.mode = mode;
        a.snapshots = snap.data();
        a.n_snapshots = 3;
        GatedDeltaRule(a, pool);
        // Outputs are O(1) and states O(1): the token-by-token form differs from the twin only
        // in float rounding; the chunked form reorders the whole computation (WY products).
        const double tol = mode == GdnMode::kChunked ? 2e-4 : 2e-5;
        EXPECT_LT(MaxAbsDiff(out, want_out), tol);
        EXPECT_LT(MaxAbsDiff(state, want_state), tol);
        EXPECT_LT(MaxAbsDiff(snap, want_snap), tol);
      }
    }
  }
}

// A pass of T tokens gives each token the bits of T one-token calls (the AR step), on every
// target and head size: spec's verify rows then equal AR's logits exactly, not only within
// rounding (docs/decoding.md: spec is bit-identical to ar).
TEST(GatedDeltaRule, RecurrentFormIsBatchInvariant) {
  TargetGuard guard;
  ThreadPool pool(2);
  const int64_t T = 17;
  for (const auto& [dk, dv] :
       {std::pair<int64_t, int64_t>{128, 128}, {32, 32}, {16, 16}, {32, 64}, {40, 40}}) {
    const GdnData d(T, 2, 4, dk, dv, static_cast<uint32_t>(dk + 7 * dv));
    for (int64_t target : AvailableTargets()) {
      ForceTargetForTest(target);
      SCOPED_TRACE(testing::Message() << TargetName(target) << " dk " << dk << " dv " << dv);
      std::vector<float> out1(T * d.nv * d.dv), out2(out1.size()), s1 = d.state, s2 = d.state;
      GdnArgs whole = d.Args(s1.data(), out1.data(), 0, T);
      whole.mode = GdnMode::kRecurrent;
      GatedDeltaRule(whole, pool);
      for (int64_t t = 0; t < T; ++t) {
        GdnArgs one = d.Args(s2.data(), out2.data(), t, 1);
        one.mode = GdnMode::kRecurrent;
        GatedDeltaRule(one, pool);
      }
      EXPECT_EQ(out1, out2);
      EXPECT_EQ(s1, s2);
    }
  }
}

// GatedDeltaRuleHead (a pipelined row block's heads, one at a time, over its own tokens): every
// head's output and state bits are those of one GatedDeltaRule call over all heads and tokens;
// a head outside [0, n_v_heads) is an error.
TEST(GatedDeltaRule, HeadByHeadGivesTheCallsBits) {
  TargetGuard guard;
  ThreadPool pool(2);
  const int64_t T = 19;
  for (const auto& [dk, dv] : {std::pair<int64_t, int64_t>{32, 32}, {128, 128}, {40, 40}}) {
    const GdnData d(T, 2, 4, dk, dv, static_cast<uint32_t>(3 * dk + dv));
    for (int64_t target : AvailableTargets()) {
      ForceTargetForTest(target);
      SCOPED_TRACE(testing::Message() << TargetName(target) << " dk " << dk << " dv " << dv);
      std::vector<float> out1(T * d.nv * d.dv), out2(out1.size()), s1 = d.state, s2 = d.state;
      GatedDeltaRule(d.Args(s1.data(), out1.data(), 0, T), pool);
      // Tokens [0, 7) then [7, T), head by head, as two row blocks run them.
      for (const auto& [t0, n] : {std::pair<int64_t, int64_t>{0, 7}, {7, T - 7}}) {
        for (int hv = 0; hv < d.nv; ++hv)
          GatedDeltaRuleHead(d.Args(s2.data(), out2.data(), t0, n), hv);
      }
      EXPECT_EQ(out1, out2);
      EXPECT_EQ(s1, s2);
    }
    std::vector<float> out(T * d.nv * d.dv), st = d.state;
    EXPECT_THROW(GatedDeltaRuleHead(d.Args(st.data(), out.data(), 0, T), d.nv), Error);
    EXPECT_THROW(GatedDeltaRuleHead(d.Args(st.data(), out.data(), 0, T), -1), Error);
  }
}

TEST(GatedDeltaRule, SplitCallsCarryTheState) {
  ThreadPool pool(2);
  const int64_t T = 80;
  const GdnData d(T, 16, 32, 128, 128, 99);
  std::vector<float> out1(T * d.nv * d.dv), out2(out1.size()), s1 = d.state, s2 = d.state;
  GdnArgs whole = d.Args(s1.data(), out1.data(), 0, T);
  whole.mode = GdnMode::kChunked;  // one call, chunks of 64 + 16
  GatedDeltaRule(whole, pool);
  GatedDeltaRule(d.Args(s2.data(), out2.data(), 0, 30), pool);
  GatedDeltaRule(d.Args(s2.data(), out2.data(), 30, T - 30), pool);
  EXPECT_LT(MaxAbsDiff(out1, out2), 2e-4);
  EXPECT_LT(MaxAbsDiff(s1, s2), 2e-4);
}

}  // namespace
}  // namespace crossword::kernels
