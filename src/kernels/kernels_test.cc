// Smoke tests of the kernels API (the full per-target suite lives in the *_test.cc files).
#include "kernels/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/ref.h"

namespace crossword::kernels {
namespace {

TEST(KernelsSmoke, F32MatMulMatchesDoubleDot) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t n_in = 64, n_out = 70, n_rows = 3;
  std::vector<float> w(n_in * n_out), x(n_in * n_rows), y(n_out * n_rows);
  for (auto& v : w) v = u(rng);
  for (auto& v : x) v = u(rng);
  ThreadPool pool(2);
  Activations act;
  act.Reserve(n_rows, n_in);
  PrepareActivations(GgmlType::kF32, x.data(), n_rows, n_in, n_in, act, pool);
  MatMul(Matrix{GgmlType::kF32, n_in, n_out, w.data(), n_in * sizeof(float)}, act, y.data(), n_out,
         pool);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t o = 0; o < n_out; ++o) {
      double s = 0.0;
      for (int64_t k = 0; k < n_in; ++k) s += double{w[o * n_in + k]} * x[r * n_in + k];
      EXPECT_NEAR(y[r * n_out + o], s, 1e-5) << r << " " << o;
    }
  }
}

}  // namespace
}  // namespace crossword::kernels
