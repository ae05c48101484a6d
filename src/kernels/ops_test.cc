// Row ops, routing and causal conv1d on every compiled+supported Highway target against the
// scalar twins; tolerances are a few float ulps (Highway's Exp/Log1p are within 1-4 ulp).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/error.h"
#include "base/fp16.h"
#include "kernels/kernels.h"
#include "kernels/ref.h"

namespace crossword::kernels {
namespace {

constexpr float kUlp = 1.0f / (1 << 23);

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

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, float rel,
                 float abs, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * std::fabs(want[i]) + abs) << what << " at " << i;
  }
}

TEST(Ops, NormsSoftmaxRopeMatchTwinsOnEveryTarget) {
  TargetGuard guard;
  for (int64_t target : AvailableTargets()) {
    ForceTargetForTest(target);
    SCOPED_TRACE(TargetName(target));
    for (int64_t n : {1, 7, 64, 2051}) {
      const auto x = Random(n, -3.0f, 3.0f, 1);
      const auto w = Random(n, 0.5f, 1.5f, 2);
      std::vector<float> got(n), want(n);
      RmsNorm(x.data(), w.data(), got.data(), n, 1e-6f);
      ref::RmsNorm(x.data(), w.data(), want.data(), n, 1e-6f);
      ExpectClose(got, want, 4 * kUlp, 0.0f, "RmsNorm");
      got = x;  // in place, no weight
      RmsNorm(got.data(), nullptr, got.data(), n, 1e-6f);
      ref::RmsNorm(x.data(), nullptr, want.data(), n, 1e-6f);
      ExpectClose(got, want, 4 * kUlp, 0.0f, "RmsNorm in place");
      got = x;
      want = x;
      L2Norm(got.data(), n, 1e-6f);
      ref::L2Norm(want.data(), n, 1e-6f);
      ExpectClose(got, want, 4 * kUlp, 0.0f, "L2Norm");
      got = x;
      want = x;
      got[0] = want[0] = 80.0f;  // a large logit: the max must be subtracted first
      Softmax(got.data(), n);
      ref::Softmax(want.data(), n);
      ExpectClose(got, want, 8 * kUlp, 1e-30f, "Softmax");
    }
    // Rope: 3 heads of 256 with stride 300, 64 rotated dims, a long-context position.
    const auto x = Random(3 * 300, -2.0f, 2.0f, 3);
    for (int64_t pos : {0, 1, 17, 131071}) {
      std::vector<float> got = x, want = x;
      RopeNeox(got.data(), 3, 256, 300, 64, pos, 1e7f);
      ref::RopeNeox(want.data(), 3, 256, 300, 64, pos, 1e7f);
      ExpectClose(got, want, 4 * kUlp, 4 * kUlp, "RopeNeox");
      for (int h = 0; h < 3; ++h) {  // dims >= n_rot and the gap between heads are untouched
        for (int i = 64; i < 300; ++i) ASSERT_EQ(got[h * 300 + i], x[h * 300 + i]);
      }
    }
  }
}

TEST(Ops, ArgMaxAndSoftmaxProbMatchTwinsOnEveryTarget) {
  TargetGuard guard;
  for (int64_t target : AvailableTargets()) {
    ForceTargetForTest(target);
    SCOPED_TRACE(TargetName(target));
    for (int64_t n : {0, 1, 7, 16, 33, 64, 4096, 4099}) {
      auto x = Random(n, -8.0f, 8.0f, 11);
      // Ties (the lowest index wins), -inf entries (masked tokens) and the max in every lane
      // position of some vector, each with no exclusion, the winner excluded, and others.
      for (int64_t m = 0; m < std::min<int64_t>(n, 40); ++m) {
        auto y = x;
        y[m] = 9.0f;
        if (m + 17 < n) y[m + 17] = 9.0f;
        if (m + 1 < n) y[m + 1] = -INFINITY;
        for (int64_t ex : {int64_t{-1}, m, m + 17, n - 1, int64_t{0}}) {
          ASSERT_EQ(ArgMax(y.data(), n, ex), ref::ArgMax(y.data(), n, ex))
              << "n " << n << " max at " << m << " exclude " << ex;
        }
      }
      if (n > 0) {
        auto y = x;
        y[n / 2] = NAN;  // the twin's answer, whatever it is
        ASSERT_EQ(ArgMax(y.data(), n, -1), ref::ArgMax(y.data(), n, -1));
        std::vector<float> ninf(n, -INFINITY);  // all -inf: the first kept index
        ASSERT_EQ(ArgMax(ninf.data(), n, 0), n > 1 ? 1 : -1);
        ASSERT_EQ(ArgMax(ninf.data(), n, -1), 0);
        x[0] = 80.0f;  // a large logit: the max must be subtracted first
        if (n > 3) x[3] = -INFINITY;
        for (int64_t i : {int64_t{0}, n / 2, n - 1}) {
          const float got = SoftmaxProb(x.data(), n, i), want = ref::SoftmaxProb(x.data(), n, i);
          ASSERT_NEAR(got, want, 8 * kUlp * want + 1e-37f) << "n " << n << " i " << i;
          // SoftmaxProbAbove: SoftmaxProb's bits when that reaches `below`, else a value in
          // [SoftmaxProb, below).
          for (float below : {-1.0f, 0.0f, 1e-6f, 0.5f, got, std::nextafter(got, 2.0f), 1.0f}) {
            const float above = SoftmaxProbAbove(x.data(), n, i, below);
            // The maximum given (as an argmax knows it): the same bits.
            const float given = SoftmaxProbAbove(x.data(), n, i, below,
                                                 *std::max_element(x.begin(), x.begin() + n));
            ASSERT_EQ(std::bit_cast<uint32_t>(given), std::bit_cast<uint32_t>(above))
                << "n " << n << " i " << i << " below " << below;
            if (got >= below) {
              ASSERT_EQ(std::bit_cast<uint32_t>(above), std::bit_cast<uint32_t>(got))
                  << "n " << n << " i " << i << " below " << below;
            } else {
              ASSERT_LT(above, below) << "n " << n << " i " << i << " below " << below;
              ASSERT_GE(above, got) << "n " << n << " i " << i << " below " << below;
            }
          }
        }
        // On a wide row an unlikely index stops early: the value is the partial sum's, above the
        // exact one (so the early path ran).
        if (n >= 4096) {
          const auto z = Random(n, -8.0f, 8.0f, 12);  // no dominating logit
          const float exact = SoftmaxProb(z.data(), n, n / 2);
          ASSERT_LT(exact, 0.01f);
          EXPECT_GT(SoftmaxProbAbove(z.data(), n, n / 2, 0.5f), exact);
        }
      }
    }
  }
  EXPECT_THROW(SoftmaxProb(nullptr, 0, 0), Error);
  EXPECT_THROW(SoftmaxProbAbove(nullptr, 0, 0, 0.5f), Error);
}

// The KV cache's F16 rows: every target gives base/fp16.h's bits, for random values across the
// whole range and for the edges (ties, subnormals, the overflow boundary, infinities, NaN), in
// a row length that leaves a scalar tail.
TEST(Ops, F32ToF16RowMatchesScalarTwinOnEveryTarget) {
  TargetGuard guard;
  std::vector<float> x = Random(1003, -70000.0f, 70000.0f, 9);
  const auto small = Random(300, -1e-4f, 1e-4f, 10);
  x.insert(x.end(), small.begin(), small.end());
  for (float v :
       {0.0f, -0.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, 65519.0f, 65520.0f,
        -65520.0f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f, 1e-10f, INFINITY, -INFINITY, NAN, -NAN,
        std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0x7fc12345u)}) {
    x.push_back(v);
  }
  std::vector<uint16_t> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = F32ToF16(x[i]);
  for (int64_t target : AvailableTargets()) {
    ForceTargetForTest(target);
    SCOPED_TRACE(TargetName(target));
    std::vector<uint16_t> got(x.size());
    F32ToF16Row(x.data(), static_cast<int64_t>(x.size()), got.data());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << "x[" << i << "] = " << x[i];
    }
  }
}

TEST(Ops, ElementwiseMatchTwinsOnEveryTarget) {
  TargetGuard guard;
  const int64_t n = 1000;
  auto x = Random(n, -30.0f, 30.0f, 4);
  x[0] = -120.0f;  // exp(-x) overflows in the naive formula
  x[1] = 20.0f;    // softplus threshold
  x[2] = 20.001f;
  x[3] = 0.0f;
  const auto b = Random(n, -2.0f, 2.0f, 5);
  for (int64_t target : AvailableTargets()) {
    ForceTargetForTest(target);
    SCOPED_TRACE(TargetName(target));
    std::vector<float> got(n), want(n);
    Sigmoid(x.data(), got.data(), n);
    ref::Sigmoid(x.data(), want.data(), n);
    ExpectClose(got, want, 4 * kUlp, 1e-37f, "Sigmoid");
    Silu(x.data(), got.data(), n);
    ref::Silu(x.data(), want.data(), n);
    ExpectClose(got, want, 4 * kUlp, 1e-37f, "Silu");
    Softplus(x.data(), got.data(), n);
    ref::Softplus(x.data(), want.data(), n);
    ExpectClose(got, want, 8 * kUlp, 1e-37f, "Softplus");
    SiluMul(x.data(), b.data(), got.data(), n);
    ref::SiluMul(x.data(), b.data(), want.data(), n);
    ExpectClose(got, want, 4 * kUlp, 1e-37f, "SiluMul");
    Add(x.data(), b.data(), got.data(), n);
    ref::Add(x.data(), b.data(), want.data(), n);
    ExpectClose(got, want, 0.0f, 0.0f, "Add");
    Mul(x.data(), b.data(), got.data(), n);
    ref::Mul(x.data(), b.data(), want.data(), n);
    ExpectClose(got, want, 0.0f, 0.0f, "Mul");
    got = b;
    want = b;
    AddScaled(x.data(), 0.3f, got.data(), n);
    ref::AddScaled(x.data(), 0.3f, want.data(), n);
    ExpectClose(got, want, kUlp, 2 * kUlp, "AddScaled");  // FMA vs mul+add
    got = x;
    want = x;
    Scale(got.data(), -1.7f, n);
    ref::Scale(want.data(), -1.7f, n);
    ExpectClose(got, want, 0.0f, 0.0f, "Scale");
  }
}

// WeightedSum replaces zeroing a row and one AddScaled per term (the MoE's combine), so it must
// give those bits on every target, for 1 to 9 terms (Clover: 8 routed experts and the shared
// one) and a width with a tail (1000 = 62 vectors of 16 + 8), and its twin's within the terms'
// roundings (the kernel fuses each multiply-add, the twin rounds the product first).
TEST(Ops, WeightedSumIsZeroThenAddScaledOnEveryTarget) {
  TargetGuard guard;
  const int64_t n = 1000;
  std::vector<std::vector<float>> rows;
  for (int j = 0; j < 9; ++j) rows.push_back(Random(n, -3.0f, 3.0f, 40 + j));
  rows[2][7] = -0.0f;
  const auto w = Random(9, -1.0f, 1.0f, 50);
  for (int64_t target : AvailableTargets()) {
    ForceTargetForTest(target);
    SCOPED_TRACE(TargetName(target));
    for (int terms = 1; terms <= 9; ++terms) {
      std::vector<const float*> x;
      for (int j = 0; j < terms; ++j) x.push_back(rows[static_cast<size_t>(j)].data());
      const std::span<const float> wj(w.data(), static_cast<size_t>(terms));
      std::vector<float> got(n, 7.0f), want(n, 0.0f), twin(n);
      WeightedSum(x, wj, got.data(), n);
      for (int j = 0; j < terms; ++j)
        AddScaled(x[static_cast<size_t>(j)], w[static_cast<size_t>(j)], want.data(), n);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * n), 0) << terms << " terms";
      ref::WeightedSum(x, wj, twin.data(), n);
      // Each of the `terms` roundings is within an ulp of a partial sum, |partial| <= 9 x 3.
      ExpectClose(got, twin, 0.0f, static_cast<float>(terms) * 27.0f * kUlp, "WeightedSum");
    }
  }
  const std::vector<const float*> two = {rows[0].data(), rows[1].data()};
  std::vector<float> y(n);
  EXPECT_THROW(WeightedSum(two, std::span<const float>(w.data(), 1), y.data(), n), Error);
}

TEST(Ops, TopKSoftmaxMatchesTwinAndBreaksTiesByLowerId) {
  TargetGuard guard;
  auto logits = Random(256, -4.0f, 4.0f, 6);
  logits[200] = logits[100] = 9.0f;  // a tie at the top: 100 must come first
  for (int64_t target : AvailableTargets()) {
    ForceTargetForTest(target);
    int32_t ids[8], want_ids[8];
    float w[8], want_w[8];
    TopKSoftmax(logits.data(), 256, 8, ids, w);
    ref::TopKSoftmax(logits.data(), 256, 8, want_ids, want_w);
    EXPECT_EQ(ids[0], 100) << TargetName(target);
    EXPECT_EQ(ids[1], 200) << TargetName(target);
    float sum = 0.0f;
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(ids[i], want_ids[i]) << TargetName(target) << " slot " << i;
      EXPECT_NEAR(w[i], want_w[i], 8 * kUlp * want_w[i]) << TargetName(target);
      sum += w[i];
      if (i > 0) {
        EXPECT_LE(w[i], w[i - 1]);
      }
    }
    EXPECT_NEAR(sum, 1.0f, 1e-6f);
  }
  int32_t ids[2];
  float w[2];
  EXPECT_THROW(TopKSoftmax(logits.data(), 256, 0, ids, w), Error);
  EXPECT_THROW(TopKSoftmax(logits.data(), 4, 5, ids, w), Error);
}

TEST(Ops, CausalConv1dMatchesTwinAndCarriesState) {
  TargetGuard guard;
  ThreadPool pool(2);
  const int64_t C = 1030, ldx = 1100;
  const int K = 4;
  const auto w = Random(C * K, -1.0f, 1.0f, 7);
  const std::vector<float> taps = ConvTapsMajor(w, C, K);
  ASSERT_EQ(taps.size(), w.size());
  EXPECT_EQ(taps[static_cast<size_t>(2 * C + 5)], w[static_cast<size_t>(5 * K + 2)]);
  EXPECT_THROW(ConvTapsMajor(w, C + 1, K), Error);
  for (int64_t T : {1, 2, 9}) {
    const auto x = Random(T * ldx, -2.0f, 2.0f, 8 + static_cast<uint32_t>(T));
    const auto state0 = Random((K - 1) * C, -2.0f, 2.0f, 9);
    std::vector<float> want_y(T * C), want_state = state0;
    ref::CausalConv1dSilu(
        {x.data(), ldx, T, C, K, w.data(), want_state.data(), want_y.data(), C, true});
    for (int64_t target : AvailableTargets()) {
      ForceTargetForTest(target);
      SCOPED_TRACE(testing::Message() << TargetName(target) << " T " << T);
      std::vector<float> y(T * C), state = state0;
      CausalConv1dSilu({x.data(), ldx, T, C, K, w.data(), state.data(), y.data(), C, true}, pool);
      ExpectClose(y, want_y, 8 * kUlp, 8 * kUlp, "conv y");
      ExpectClose(state, want_state, 0.0f, 0.0f, "conv state");
      // update_state = false leaves the state alone and gives the same outputs.
      std::vector<float> y2(T * C), state2 = state0;
      CausalConv1dSilu({x.data(), ldx, T, C, K, w.data(), state2.data(), y2.data(), C, false},
                       pool);
      ExpectClose(y2, y, 0.0f, 0.0f, "conv y without state update");
      ExpectClose(state2, state0, 0.0f, 0.0f, "conv state untouched");
      // The tap-major copy of the weights gives the same bits as w transposed per call.
      std::vector<float> y3(T * C), state3 = state0;
      Conv1dArgs a{x.data(), ldx, T, C, K, w.data(), state3.data(), y3.data(), C, true};
      a.w_taps = taps.data();
      CausalConv1dSilu(a, pool);
      ExpectClose(y3, y, 0.0f, 0.0f, "conv y from tap-major weights");
      ExpectClose(state3, state, 0.0f, 0.0f, "conv state from tap-major weights");
    }
  }
  // Splitting a sequence in two calls equals one call over the whole sequence.
  const int64_t T = 7;
  const auto x = Random(T * C, -2.0f, 2.0f, 10);
  std::vector<float> s1((K - 1) * C, 0.0f), s2 = s1, y1(T * C), y2(T * C);
  CausalConv1dSilu({x.data(), C, T, C, K, w.data(), s1.data(), y1.data(), C, true}, pool);
  CausalConv1dSilu({x.data(), C, 3, C, K, w.data(), s2.data(), y2.data(), C, true}, pool);
  CausalConv1dSilu({x.data() + 3 * C, C, 4, C, K, w.data(), s2.data(), y2.data() + 3 * C, C, true},
                   pool);
  ExpectClose(y2, y1, 0.0f, 0.0f, "split sequence");
  ExpectClose(s2, s1, 0.0f, 0.0f, "split sequence state");
}

}  // namespace
}  // namespace crossword::kernels
