// MatMul and PrepareActivations on every compiled+supported Highway target against the scalar
// twins (ref.h), and the twins against plain double dot products of dequantized data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/fp16.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "kernels/kernels.h"
#include "kernels/ref.h"
#if defined(__x86_64__)
#include "kernels/vnni_kernels.h"
#endif

namespace crossword::kernels {
namespace {

constexpr double kEps = 1.0 / (1 << 23);  // float32 unit roundoff x 2

// Restores the real CPU when a test ends (ForceTargetForTest is global).
struct TargetGuard {
  ~TargetGuard() { ForceTargetForTest(0); }
};

// Every compiled+supported target. Apply one with Use().
struct Config {
  int64_t target;
  void Use() const { ForceTargetForTest(target); }
  std::string Name() const { return TargetName(target); }
};
std::vector<Config> Configs() {
  std::vector<Config> out;
  for (int64_t target : AvailableTargets()) out.push_back({target});
  return out;
}

// Random weight rows of `type` that decode to modest values (scales 1e-3..1e-2).
std::vector<uint8_t> RandomWeights(GgmlType type, int64_t n_in, int64_t n_out, std::mt19937& rng) {
  const size_t rb = *RowBytes(type, n_in);
  std::vector<uint8_t> data(rb * n_out);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f), scale(1e-3f, 1e-2f);
  for (auto& b : data) b = static_cast<uint8_t>(byte(rng));
  auto put_half = [](uint8_t* p, float v) {
    const uint16_t h = F32ToF16(v);
    std::memcpy(p, &h, 2);
  };
  for (int64_t o = 0; o < n_out; ++o) {
    uint8_t* row = data.data() + o * rb;
    switch (type) {
      case GgmlType::kF32:
        for (int64_t k = 0; k < n_in; ++k) {
          const float v = unit(rng);
          std::memcpy(row + 4 * k, &v, 4);
        }
        break;
      case GgmlType::kF16:
        for (int64_t k = 0; k < n_in; ++k) put_half(row + 2 * k, unit(rng));
        break;
      case GgmlType::kBF16:
        for (int64_t k = 0; k < n_in; ++k) {
          const uint16_t h = F32ToBF16(unit(rng));
          std::memcpy(row + 2 * k, &h, 2);
        }
        break;
      case GgmlType::kQ8_0:
        for (int64_t b = 0; b < n_in / 32; ++b) put_half(row + b * sizeof(BlockQ8_0), scale(rng));
        break;
      case GgmlType::kQ4_0:
        for (int64_t b = 0; b < n_in / 32; ++b) put_half(row + b * sizeof(BlockQ4_0), scale(rng));
        break;
      case GgmlType::kQ4_K:
        for (int64_t b = 0; b < n_in / 256; ++b) {
          auto* blk = reinterpret_cast<BlockQ4_K*>(row + b * sizeof(BlockQ4_K));
          blk->d = F32ToF16(scale(rng) * 0.1f);
          blk->dmin = F32ToF16(scale(rng) * 0.1f);
        }
        break;
      case GgmlType::kQ5_K:
        for (int64_t b = 0; b < n_in / 256; ++b) {
          auto* blk = reinterpret_cast<BlockQ5_K*>(row + b * sizeof(BlockQ5_K));
          blk->d = F32ToF16(scale(rng) * 0.05f);
          blk->dmin = F32ToF16(scale(rng) * 0.1f);
        }
        break;
      case GgmlType::kQ6_K:
        for (int64_t b = 0; b < n_in / 256; ++b) {
          auto* blk = reinterpret_cast<BlockQ6_K*>(row + b * sizeof(BlockQ6_K));
          blk->d = F32ToF16(scale(rng) * 0.1f);
        }
        break;
      default:
        ADD_FAILURE() << "unexpected type";
    }
  }
  return data;
}

std::vector<float> RandomActs(int64_t n_rows, int64_t n_in, std::mt19937& rng) {
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> x(n_rows * n_in);
  for (int64_t r = 0; r < n_rows; ++r) {
    const float mag = r == 1 ? 0.0f : std::pow(10.0f, static_cast<float>(r % 5) - 2.0f);
    for (int64_t k = 0; k < n_in; ++k) x[r * n_in + k] = mag * unit(rng);
  }
  return x;
}

// Sum over k of |w_k * x_k| with dequantized weights and activations: scales the tolerance.
double AbsDot(GgmlType type, const uint8_t* wrow, const Activations& act, int64_t r) {
  const int64_t n = act.n_in();
  std::vector<float> w(n), x(n);
  DequantizeRow(type, wrow, w.data(), n);
  const uint8_t* row = act.row(r);
  switch (act.format()) {
    case ActFormat::kF32:
      std::memcpy(x.data(), row, 4 * n);
      break;
    case ActFormat::kF16:
      DequantizeRow(GgmlType::kF16, row, x.data(), n);
      break;
    case ActFormat::kBF16:
      DequantizeRow(GgmlType::kBF16, row, x.data(), n);
      break;
    default: {
      const int64_t bs = act.format() == ActFormat::kQ8_0 ? 32 : 256;
      const auto* q = reinterpret_cast<const int8_t*>(row);
      const auto* d = reinterpret_cast<const float*>(row + act.scale_offset());
      for (int64_t k = 0; k < n; ++k) x[k] = q[k] * d[k / bs];
    }
  }
  double s = 0.0;
  for (int64_t k = 0; k < n; ++k) s += std::fabs(static_cast<double>(w[k]) * x[k]);
  return s;
}

struct Case {
  GgmlType type;
  int64_t n_in;
};

const Case kCases[] = {
    {GgmlType::kF32, 100},   {GgmlType::kF32, 512},   {GgmlType::kF16, 77},
    {GgmlType::kF16, 640},   {GgmlType::kBF16, 99},   {GgmlType::kBF16, 512},
    {GgmlType::kQ8_0, 64},   {GgmlType::kQ8_0, 2304}, {GgmlType::kQ4_0, 96},
    {GgmlType::kQ4_0, 2112}, {GgmlType::kQ4_K, 256},  {GgmlType::kQ4_K, 2304},
    {GgmlType::kQ6_K, 256},  {GgmlType::kQ6_K, 2560}, {GgmlType::kQ5_K, 256},
    {GgmlType::kQ5_K, 2304},
};

TEST(MatMul, MatchesScalarTwinOnEveryTarget) {
  TargetGuard guard;
  std::mt19937 rng(42);
  ThreadPool pool(2);
  const std::vector<Config> configs = Configs();
  ASSERT_FALSE(configs.empty());
  for (const Case& c : kCases) {
    const int64_t n_out = 37;
    for (int64_t n_rows : {1, 3, 13}) {
      const auto w = RandomWeights(c.type, c.n_in, n_out, rng);
      const auto x = RandomActs(n_rows, c.n_in, rng);
      const Matrix m{c.type, c.n_in, n_out, w.data(), *RowBytes(c.type, c.n_in)};
      Activations act;
      act.Reserve(n_rows, c.n_in);
      ref::PrepareActivations(c.type, x.data(), n_rows, c.n_in, c.n_in, act);
      std::vector<float> want(n_rows * n_out);
      ref::MatMul(MatMulJob{m, &act, n_rows, nullptr, want.data(), n_out, nullptr});
      const int64_t terms = ref::ActBlockSize(ActFormatFor(c.type)) == 1
                                ? c.n_in
                                : c.n_in / ref::ActBlockSize(ActFormatFor(c.type));
      for (const Config& config : configs) {
        config.Use();
        SCOPED_TRACE(testing::Message() << config.Name() << " " << TypeName(c.type) << " n_in "
                                        << c.n_in << " rows " << n_rows);
        std::vector<float> got(n_rows * n_out, -1.0f);
        MatMul(m, act, got.data(), n_out, pool);
        for (int64_t r = 0; r < n_rows; ++r) {
          for (int64_t o = 0; o < n_out; ++o) {
            const double tol =
                (terms + 8) * kEps * AbsDot(c.type, w.data() + o * m.row_bytes, act, r) + 1e-30;
            ASSERT_NEAR(got[r * n_out + o], want[r * n_out + o], tol)
                << "row " << r << " out " << o;
          }
        }
      }
    }
  }
}

// Tall matrices (an output head) are cut into longer tasks; every row must still be written once
// and equal the scalar twin's, including the rows of the last, partial task.
TEST(MatMul, TallMatrixEveryRowOnce) {
  TargetGuard guard;
  std::mt19937 rng(11);
  ThreadPool pool(2);
  const int64_t n_in = 64, n_out = 65536 + 37;
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ6_K}) {
    const int64_t k = type == GgmlType::kQ6_K ? 256 : n_in;
    const auto w = RandomWeights(type, k, n_out, rng);
    const auto x = RandomActs(1, k, rng);
    const Matrix m{type, k, n_out, w.data(), *RowBytes(type, k)};
    Activations act;
    act.Reserve(1, k);
    ref::PrepareActivations(type, x.data(), 1, k, k, act);
    std::vector<float> want(n_out), got(n_out, std::nanf(""));
    ref::MatMul(MatMulJob{m, &act, 1, nullptr, want.data(), n_out, nullptr});
    for (const Config& config : Configs()) {
      config.Use();
      SCOPED_TRACE(testing::Message() << config.Name() << " " << TypeName(type));
      std::fill(got.begin(), got.end(), std::nanf(""));
      MatMul(m, act, got.data(), n_out, pool);
      for (int64_t o = 0; o < n_out; ++o) {
        const double tol =
            (k + 8) * kEps * AbsDot(type, w.data() + o * m.row_bytes, act, 0) + 1e-30;
        ASSERT_NEAR(got[o], want[o], tol) << "out " << o;
      }
    }
  }
}

TEST(MatMul, GatherScatterRowsInOneRegion) {
  TargetGuard guard;
  std::mt19937 rng(7);
  ThreadPool pool(2);
  const int64_t n_in = 512, n_out = 40, n_tok = 6;
  const auto x = RandomActs(n_tok, n_in, rng);
  for (GgmlType type :
       {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kF16}) {
    const auto w1 = RandomWeights(type, n_in, n_out, rng);
    const auto w2 = RandomWeights(type, n_in, n_out, rng);
    const size_t rb = *RowBytes(type, n_in);
    Activations act;
    act.Reserve(n_tok, n_in);
    PrepareActivations(type, x.data(), n_tok, n_in, n_in, act, pool);
    // Expert 1 gets tokens {4, 0, 5, 2, 3}, expert 2 gets {1, 4}; outputs go to (token, slot)
    // rows (5 rows take the many-row kernels, 2 the decode ones).
    const int32_t xr1[] = {4, 0, 5, 2, 3}, yr1[] = {8, 0, 10, 2, 5};
    const int32_t xr2[] = {1, 4}, yr2[] = {3, 9};
    const int64_t ldy = n_out + 3;
    for (const Config& config : Configs()) {
      config.Use();
      SCOPED_TRACE(testing::Message() << config.Name() << " " << TypeName(type));
      std::vector<float> y(12 * ldy, 123.0f);
      const MatMulJob jobs[] = {
          {{type, n_in, n_out, w1.data(), rb}, &act, 5, xr1, y.data(), ldy, yr1},
          {{type, n_in, n_out, w2.data(), rb}, &act, 2, xr2, y.data(), ldy, yr2}};
      MatMul(jobs, pool);
      for (const auto& [w, xr, yr, n] :
           {std::tuple{&w1, xr1, yr1, 5}, std::tuple{&w2, xr2, yr2, 2}}) {
        for (int i = 0; i < n; ++i) {
          for (int64_t o = 0; o < n_out; ++o) {
            const double want = ref::DotRow(type, w->data() + o * rb, act, xr[i]);
            const double tol = (n_in + 8) * kEps * AbsDot(type, w->data() + o * rb, act, xr[i]);
            ASSERT_NEAR(y[yr[i] * ldy + o], want, tol);
          }
          EXPECT_EQ(y[yr[i] * ldy + n_out], 123.0f) << "wrote past n_out";
        }
      }
      EXPECT_EQ(y[1 * ldy], 123.0f) << "wrote a row no job maps to";
    }
  }
}

// Jobs of 1-3 rows run in tasks of 64 to 512 output rows, by how many rows of them the call has
// (matmul.cc kOutPerFewTask): every size, odd row counts (a last task of one partial tile) and
// a many-row job beside them compute every output row once, the same as ref::MatMul.
TEST(MatMul, FewRowJobsInLongTasksComputeEveryRow) {
  TargetGuard guard;
  std::mt19937 rng(13);
  ThreadPool pool(2);
  const int64_t n_in = 64;
  const GgmlType type = GgmlType::kQ4_0;
  const size_t rb = *RowBytes(type, n_in);
  const auto x = RandomActs(6, n_in, rng);
  Activations act;
  act.Reserve(6, n_in);
  ref::PrepareActivations(type, x.data(), 6, n_in, n_in, act);
  // Row counts of the few-row jobs per case: 64-row tasks (300 rows), 128 (1100 + 37), 256
  // (2100), 512 (3000 + 1500 + 5: three jobs, one of 2 and one of 3 activation rows).
  const std::vector<std::vector<int64_t>> cases = {{300}, {1137}, {2100}, {3000, 1505, 7}};
  for (const auto& outs : cases) {
    std::vector<std::vector<uint8_t>> ws;
    std::vector<std::vector<float>> got, want;
    std::vector<MatMulJob> jobs;
    for (size_t j = 0; j <= outs.size(); ++j) {
      // The last job has 6 rows (the many-row kernels) and 100 outputs.
      const int64_t n_out = j < outs.size() ? outs[j] : 100;
      const int64_t rows = j < outs.size() ? 1 + static_cast<int64_t>(j % 3) : 6;
      ws.push_back(RandomWeights(type, n_in, n_out, rng));
      got.emplace_back(rows * n_out);
      want.emplace_back(rows * n_out);
      const Matrix m{type, n_in, n_out, ws.back().data(), rb};
      ref::MatMul(MatMulJob{m, &act, rows, nullptr, want.back().data(), n_out, nullptr});
      jobs.push_back({m, &act, rows, nullptr, nullptr, n_out, nullptr});
    }
    for (size_t j = 0; j < jobs.size(); ++j) jobs[j].y = got[j].data();
    for (const Config& config : Configs()) {
      config.Use();
      SCOPED_TRACE(testing::Message()
                   << config.Name() << " " << outs.size() << " jobs, first " << outs[0] << " rows");
      for (auto& g : got) std::fill(g.begin(), g.end(), std::nanf(""));
      MatMul(jobs, pool);
      for (size_t j = 0; j < jobs.size(); ++j) {
        for (int64_t r = 0; r < jobs[j].n_rows; ++r) {
          for (int64_t o = 0; o < jobs[j].w.n_out; ++o) {
            const double tol =
                (n_in + 8) * kEps * AbsDot(type, ws[j].data() + o * rb, act, r) + 1e-30;
            ASSERT_NEAR(got[j][r * jobs[j].w.n_out + o], want[j][r * jobs[j].w.n_out + o], tol)
                << "job " << j << " row " << r << " out " << o;
          }
        }
      }
    }
  }
}

// The twins themselves: block-wise integer dot == double dot of the operands dequantized by
// core's DequantizeRow (bit-exact with ggml, checked against it in core's tests).
TEST(MatMulRef, DotRowEqualsDequantizedDoubleDot) {
  std::mt19937 rng(3);
  for (const Case& c : kCases) {
    const auto w = RandomWeights(c.type, c.n_in, 3, rng);
    const auto x = RandomActs(4, c.n_in, rng);
    Activations act;
    act.Reserve(4, c.n_in);
    ref::PrepareActivations(c.type, x.data(), 4, c.n_in, c.n_in, act);
    const size_t rb = *RowBytes(c.type, c.n_in);
    std::vector<float> wf(c.n_in), xf(c.n_in);
    for (int64_t r = 0; r < 4; ++r) {
      for (int o = 0; o < 3; ++o) {
        DequantizeRow(c.type, w.data() + o * rb, wf.data(), c.n_in);
        const uint8_t* row = act.row(r);
        double want = 0.0;
        for (int64_t k = 0; k < c.n_in; ++k) {
          double xv;
          switch (act.format()) {
            case ActFormat::kF32:
              xv = reinterpret_cast<const float*>(row)[k];
              break;
            case ActFormat::kF16:
              xv = F16ToF32(reinterpret_cast<const uint16_t*>(row)[k]);
              break;
            case ActFormat::kBF16:
              xv = BF16ToF32(reinterpret_cast<const uint16_t*>(row)[k]);
              break;
            default: {
              const int64_t bs = ref::ActBlockSize(act.format());
              xv = static_cast<double>(reinterpret_cast<const int8_t*>(row)[k]) *
                   reinterpret_cast<const float*>(row + act.scale_offset())[k / bs];
            }
          }
          want += wf[k] * xv;
        }
        // The twins round d_w * d_x (and Q4_K's sub-block scale products) to float once.
        const double tol = 4 * kEps * AbsDot(c.type, w.data() + o * rb, act, r) + 1e-30;
        EXPECT_NEAR(ref::DotRow(c.type, w.data() + o * rb, act, r), want, tol)
            << TypeName(c.type) << " n_in " << c.n_in;
      }
    }
  }
}

// Widths: 512 (16 blocks of 32), 128 (4 blocks: the embedded model's rows) and 608 (19 blocks, not
// a multiple of any target's lane count); K-quants need multiples of 256.
TEST(PrepareActivations, BitExactWithScalarTwinOnEveryTarget) {
  TargetGuard guard;
  std::mt19937 rng(11);
  ThreadPool pool(2);
  for (const int64_t n_in : {512, 128, 608}) {
    const int64_t n_rows = 7;
    auto x = RandomActs(n_rows, n_in, rng);
    x[5] = 7e4f;     // overflows f16
    x[6] = 1e-6f;    // f16 subnormal
    x[7] = -3e-39f;  // f32 subnormal
    x[2 * n_in + 40] = -x[2 * n_in + 40];
    for (int64_t k = 0; k < 32; ++k) x[3 * n_in + k] = (k % 2 ? 1.0f : -1.0f) * 0.5f;  // ties
    for (int64_t k = 0; k < 32; ++k) x[4 * n_in + 32 + k] = 0.0f;  // an all-zero block
    // Q8_K takes the sign of the first element of largest magnitude: ties of opposite signs in
    // one vector and in two (row 6, whose other elements are at most 10x smaller; its first two
    // Q8_K blocks, so only where the row has them).
    if (n_in >= 512) {
      x[6 * n_in + 3] = 50.0f;
      x[6 * n_in + 9] = -50.0f;
      x[6 * n_in + 256 + 70] = -50.0f;
      x[6 * n_in + 256 + 200] = 50.0f;
    }
    for (GgmlType type :
         {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_K}) {
      if (type == GgmlType::kQ4_K && n_in % 256 != 0) continue;
      Activations want, got;
      want.Reserve(n_rows, n_in);
      got.Reserve(n_rows, n_in);
      ref::PrepareActivations(type, x.data(), n_rows, n_in, n_in, want);
      for (int64_t target : AvailableTargets()) {
        ForceTargetForTest(target);
        PrepareActivations(type, x.data(), n_rows, n_in, n_in, got, pool);
        ASSERT_EQ(got.row_stride(), want.row_stride());
        for (int64_t r = 0; r < n_rows; ++r) {
          EXPECT_EQ(std::memcmp(got.row(r), want.row(r), want.row_stride()), 0)
              << TargetName(target) << " " << TypeName(type) << " n_in " << n_in << " row " << r;
        }
      }
    }
  }
}

// Q8_0 rows are quantized four blocks at a time on AVX-512 (act_quant.cc). Each block must get
// what the block-at-a-time code gives it alone (a row of one block), also for the blocks the
// scalar twin does not define: a subnormal maximum (127/amax overflows; the group falls back)
// and a NaN (the same). Positions: a NaN in the second group, a subnormal block in the fourth.
TEST(PrepareActivations, Q8_0GroupsMatchBlocksOnEveryTarget) {
  TargetGuard guard;
  std::mt19937 rng(12);
  ThreadPool pool(1);
  const int64_t n_in = 608;  // 19 blocks: four groups of four, then three blocks
  auto x = RandomActs(1, n_in, rng);
  x[5] = 7e4f;                                    // f16 overflow of the scale
  for (int64_t k = 32; k < 64; ++k) x[k] = 0.0f;  // an all-zero block
  for (int64_t k = 64; k < 96; ++k) x[k] = (k % 2 ? 0.5f : -0.5f) * (k % 3 ? 1.0f : 2.0f);
  x[4 * 32 + 9] = std::numeric_limits<float>::quiet_NaN();  // the second group
  for (int64_t k = 12 * 32; k < 13 * 32; ++k) x[k] = (k % 3 ? 1.0f : -2.0f) * 1e-39f;
  for (int64_t target : AvailableTargets()) {
    ForceTargetForTest(target);
    Activations row, block;
    row.Reserve(1, n_in);
    block.Reserve(1, 32);
    PrepareActivations(GgmlType::kQ8_0, x.data(), 1, n_in, n_in, row, pool);
    for (int64_t b = 0; b < n_in / 32; ++b) {
      PrepareActivations(GgmlType::kQ8_0, x.data() + b * 32, 1, 32, 32, block, pool);
      EXPECT_EQ(std::memcmp(row.row(0) + b * 32, block.row(0), 32), 0)
          << TargetName(target) << " block " << b;
      EXPECT_EQ(std::memcmp(row.row(0) + row.scale_offset() + 4 * b,
                            block.row(0) + block.scale_offset(), 4),
                0)
          << TargetName(target) << " block " << b;
      EXPECT_EQ(std::memcmp(row.row(0) + row.sums_offset() + 4 * b,
                            block.row(0) + block.sums_offset(), 4),
                0)
          << TargetName(target) << " block " << b;
    }
  }
}

// Activation quantization against core's QuantizeRow (an independent, ggml-exact reference):
// Q8_K bit-exact; Q8_0 uses ggml's x86 form (q = nearest-even(x * 127/amax)) where the
// reference rounds x/d half away from zero, so quants may differ by one on rounding ties only.
TEST(PrepareActivations, AgreesWithCoreQuantizeRow) {
  std::mt19937 rng(5);
  const int64_t n = 1024;
  const auto x = RandomActs(3, n, rng);
  Activations act;
  act.Reserve(3, n);
  ThreadPool pool(1);
  PrepareActivations(GgmlType::kQ4_K, x.data(), 3, n, n, act, pool);
  for (int64_t r = 0; r < 3; ++r) {
    std::vector<BlockQ8_K> blocks(n / 256);
    QuantizeRow(GgmlType::kQ8_K, x.data() + r * n, blocks.data(), n);
    const uint8_t* row = act.row(r);
    for (int64_t b = 0; b < n / 256; ++b) {
      EXPECT_EQ(reinterpret_cast<const float*>(row + act.scale_offset())[b], blocks[b].d);
      EXPECT_EQ(std::memcmp(row + b * 256, blocks[b].qs, 256), 0) << "row " << r << " block " << b;
      EXPECT_EQ(std::memcmp(row + act.sums_offset() + b * 32, blocks[b].bsums, 32), 0);
      for (int j = 0; j < 256; ++j) {  // the biased codes of the Q6_K tile kernel: q + 128
        ASSERT_EQ(row[act.biased_offset() + b * 256 + j], blocks[b].qs[j] + 128)
            << "row " << r << " block " << b << " element " << j;
      }
    }
  }
  PrepareActivations(GgmlType::kQ8_0, x.data(), 3, n, n, act, pool);
  int64_t differing = 0;
  for (int64_t r = 0; r < 3; ++r) {
    std::vector<BlockQ8_0> blocks(n / 32);
    QuantizeRow(GgmlType::kQ8_0, x.data() + r * n, blocks.data(), n);
    const uint8_t* row = act.row(r);
    for (int64_t b = 0; b < n / 32; ++b) {
      EXPECT_EQ(reinterpret_cast<const float*>(row + act.scale_offset())[b], F16ToF32(blocks[b].d));
      int sum = 0;
      for (int j = 0; j < 32; ++j) {
        const int q = reinterpret_cast<const int8_t*>(row)[b * 32 + j];
        EXPECT_LE(std::abs(q - blocks[b].qs[j]), 1);
        differing += q != blocks[b].qs[j];
        sum += q;
      }
      EXPECT_EQ(reinterpret_cast<const int32_t*>(row + act.sums_offset())[b], -128 * sum);
    }
  }
  EXPECT_LE(differing, 3 * n / 100) << "more than rounding ties differ";
}

TEST(Activations, RejectsTooSmallReservationAndBadShapes) {
  Activations act;
  act.Reserve(2, 256);
  ThreadPool pool(1);
  const uint8_t wq0[1] = {0};
  std::vector<float> x(4 * 512, 1.0f);
  EXPECT_THROW(PrepareActivations(GgmlType::kQ8_0, x.data(), 4, 512, 512, act, pool), Error);
  EXPECT_THROW(PrepareActivations(GgmlType::kQ4_K, x.data(), 1, 100, 100, act, pool), Error);
  EXPECT_THROW(PrepareActivations(GgmlType::kQ3_K, x.data(), 1, 256, 256, act, pool), Error);
  PrepareActivations(GgmlType::kQ8_0, x.data(), 2, 256, 256, act, pool);
  std::vector<float> w(256 * 4, 0.5f), y(8);
  // F32 weights with Q8_0 activations: a format mismatch must be reported, not computed.
  EXPECT_THROW(MatMul(Matrix{GgmlType::kF32, 256, 4, w.data(), 1024}, act, y.data(), 4, pool),
               Error);
  // n_in = 0: every output is an empty sum.
  Activations empty;
  empty.Reserve(5, 0);
  PrepareActivations(GgmlType::kQ8_0, x.data(), 5, 0, 0, empty, pool);
  std::vector<float> y0(5 * 20, 1.0f);
  MatMul(Matrix{GgmlType::kQ8_0, 0, 20, wq0, 0}, empty, y0.data(), 20, pool);
  for (float v : y0) EXPECT_EQ(v, 0.0f);
  // A gather index outside the prepared rows is rejected before anything runs.
  std::vector<uint8_t> wq(4 * sizeof(BlockQ8_0) * 8, 0);
  const int32_t bad_rows[] = {0, 2};
  const MatMulJob job{{GgmlType::kQ8_0, 256, 4, wq.data(), 8 * sizeof(BlockQ8_0)},
                      &act,
                      2,
                      bad_rows,
                      y.data(),
                      4,
                      nullptr};
  EXPECT_THROW(MatMul(std::span<const MatMulJob>(&job, 1), pool), Error);
}

// Lossless speculation needs every row's result to be independent of the batch: the same bits
// for a row computed alone, in any batch size, at any position, with any thread count. Real
// widths (2048, 4096) so the decode (few rows) and GEMM (many rows) code paths both run, and the
// embedded model's short rows (128, 256: a copy's short-row path, against the per-call tiles).
TEST(MatMul, BatchInvariantBitForBit) {
  TargetGuard guard;
  std::mt19937 rng(99);
  ThreadPool pool1(1), pool2(2);
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,
                            GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
  int n_repacked = 0;
  for (GgmlType type : types) {
    // 2080: 65 blocks of 32, an odd count (Q4_0's 288-byte tile blocks then start off 64-byte
    // boundaries) and a last chunk of one block; K-quants need multiples of 256 and skip it.
    // 128 (4 blocks): one group of output tiles; 256 (8 blocks): groups of 3 tiles, so the 75
    // outputs take a full group and a partial one.
    for (int64_t n_in : {128, 256, 2048, 2080, 4096 + 512}) {
      if (!RowBytes(type, n_in)) continue;
      const int64_t n_out = 75, n_rows = 19;  // 75: a partial 16-row tile; 2 tasks of 64
      const auto w = RandomWeights(type, n_in, n_out, rng);
      const auto x = RandomActs(n_rows, n_in, rng);
      const Matrix m{type, n_in, n_out, w.data(), *RowBytes(type, n_in)};
      Activations act;
      act.Reserve(n_rows, n_in);
      PrepareActivations(type, x.data(), n_rows, n_in, n_in, act, pool2);
      for (const Config& config : Configs()) {
        config.Use();
        // The prepared rows as this configuration builds them.
        PrepareActivations(type, x.data(), n_rows, n_in, n_in, act, pool2);
        SCOPED_TRACE(testing::Message()
                     << config.Name() << " " << TypeName(type) << " n_in " << n_in);
        std::vector<float> all(n_rows * n_out);
        MatMul(m, act, all.data(), n_out, pool2);
        // The same weights repacked once (where this target has a tile layout) must change
        // nothing either: single rows read the GGUF rows, batches the repacked tiles.
        std::vector<Matrix> variants{m};
        std::vector<uint8_t> packed_store;
        if (const size_t bytes = RepackedBytes(m); bytes > 0) {
          packed_store.resize(bytes + 64);
          const uintptr_t addr = reinterpret_cast<uintptr_t>(packed_store.data());
          void* aligned = packed_store.data() + (64 - addr % 64) % 64;
          Repack(m, aligned);
          variants.push_back(m);
          variants.back().packed = aligned;
          ++n_repacked;
        }
        // Sub-batches [r0, r0 + n) through gathered rows, 1 and 2 threads.
        for (size_t v = 0; v < variants.size(); ++v) {
          for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 19}) {
            for (int64_t r0 : {int64_t{0}, n_rows - n}) {
              std::vector<int32_t> rows(n);
              for (int64_t i = 0; i < n; ++i) rows[i] = static_cast<int32_t>(r0 + i);
              std::vector<float> y(n * n_out, -1.0f);
              const MatMulJob job{variants[v], &act, n, rows.data(), y.data(), n_out, nullptr};
              MatMul(std::span<const MatMulJob>(&job, 1), n % 2 ? pool1 : pool2);
              for (int64_t i = 0; i < n; ++i) {
                ASSERT_EQ(std::memcmp(&y[i * n_out], &all[(r0 + i) * n_out], 4 * n_out), 0)
                    << (v ? "repacked, " : "") << "batch of " << n << " rows at " << r0 << ", row "
                    << i;
              }
            }
          }
        }
      }
    }
  }
  // Q8_0 and Q4_0 at the five widths, Q4_K, Q5_K and Q6_K at 2048 (their copies hold 2048-column
  // chunks, so 256 and 4608 get none) on the AVX3_DL target, when the CPU has it.
  bool has_vnni = false;
  for (const Config& config : Configs()) has_vnni |= config.Name() == std::string("AVX3_DL");
  EXPECT_EQ(n_repacked, has_vnni ? 13 : 0);
}

TEST(Repack, OnlyTypesWithATileLayout) {
  TargetGuard guard;
  std::mt19937 rng(5);
  const auto w = RandomWeights(GgmlType::kF32, 64, 16, rng);
  const Matrix m{GgmlType::kF32, 64, 16, w.data(), *RowBytes(GgmlType::kF32, 64)};
  EXPECT_EQ(RepackedBytes(m), 0u);
  alignas(64) std::byte out[64];
  EXPECT_THROW(Repack(m, out), Error);
  const auto q = RandomWeights(GgmlType::kQ8_0, 64, 17, rng);
  const Matrix mq{GgmlType::kQ8_0, 64, 17, q.data(), *RowBytes(GgmlType::kQ8_0, 64)};
  if (RepackedBytes(mq) > 0) {
    EXPECT_EQ(RepackedBytes(mq), 2u * 2u * 576u);  // 2 tiles of 16 rows x 2 blocks
    alignas(64) std::byte buf[2 * 2 * 576 + 1];
    EXPECT_THROW(Repack(mq, buf + 1), Error);  // misaligned
  }
}

// The probe counts what it runs: 16 chains of 16 lanes, each lane starting at its chain's index
// and gaining 4 x (3 x 5) = 60 per round, sum to 16 x (0 + ... + 15) + 16 x 16 x 60 x rounds.
// The rate is positive exactly on the target whose products use the instruction.
TEST(Int8PeakRate, CountsTheInstructionsItRunsAndOnlyWhereTheProductsUseThem) {
  TargetGuard guard;
  ThreadPool pool(2);
  for (const Config& config : Configs()) {
    config.Use();
    const bool vnni = config.Name() == std::string("AVX3_DL");
    const double peak = Int8PeakRate(pool);
    if (!vnni) {
      EXPECT_EQ(peak, 0.0) << config.Name();
      continue;
    }
    EXPECT_GT(peak, 1e9) << config.Name();  // any AVX-512 VNNI core: tens of G per thread
#if defined(__x86_64__)
    for (int64_t rounds : {0, 1, 1000}) {
      EXPECT_EQ(vnni::DpbusdChains(rounds), 16 * 120 + 16 * 16 * 60 * rounds) << rounds;
    }
#endif
  }
}

}  // namespace
}  // namespace crossword::kernels
