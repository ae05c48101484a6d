// Activation quantization and mat-vec / small mat-mat shaders against the CPU scalar twins, on
// every weight type, both reduction paths and both mat-vec paths (float and int8).
//
// Tolerances (docs/gpu.md): the int8 path computes exactly the integer block sums of the twin
// (ref::MatMul on ref::PrepareActivations), so the only differences are float roundings: the
// products of block scales and the float sum over n_in/16 half-chunk terms and the workgroup
// reduction, bounded by gamma_{n_in/16 + 16} * sum_k |w_k x_k| (Higham's bound for a float sum,
// with 16 covering the reduction tree and the scale products), plus the twin's own rounding of
// its double result to float (|y| 2^-24). The float path multiplies dequantized weights by f32
// activations: n_in float products and sums, gamma_{n_in + 16} * sum_k |w_k x_k|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backends/vulkan/ops.h"
#include "backends/vulkan/test_util.h"
#include "core/quant.h"
#include "kernels/ref.h"

namespace crossword::vulkan {
namespace {

using testing::Gamma;
using testing::Guarded;
using testing::kUnit;
using testing::PathConfig;
using testing::VkTest;

constexpr GgmlType kTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
                               GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

bool Quantized(GgmlType t) {
  return t != GgmlType::kF32 && t != GgmlType::kF16 && t != GgmlType::kBF16;
}

class VulkanMatMul : public VkTest {
 protected:
  // One product on the GPU against its twin. Returns nothing; failures are reported.
  void Check(GgmlType type, int64_t n_in, int64_t n_out, int64_t n_rows, const PathConfig& c,
             bool accumulate = false) {
    const std::string what = fmt::format("{} {}x{} rows {} {}{}", TypeName(type), n_out, n_in,
                                         n_rows, c.Name(), accumulate ? " accumulate" : "");
    SCOPED_TRACE(what);
    const std::vector<uint8_t> wbytes = testing::RandomWeightBytes(type, n_in, n_out, rng_);
    const int64_t ldx = n_in + 3;  // odd strides
    const int64_t ldy = n_out + 5;
    const std::vector<float> x = testing::RandomFloats(rng_, n_rows * ldx);
    DeviceMatrix m;
    m.type = type;
    m.n_in = n_in;
    m.n_out = n_out;
    UploadMatrix(pool(), uploader(), m, wbytes.data(), "w");
    const BufferView xv = Upload(x);
    std::vector<float> y0(n_rows * ldy, 0.25f);
    Guarded y = Output(y0.size() * 4, accumulate ? y0.data() : nullptr);

    const int64_t ldq = ActQ8RowWords(type, n_in) + 1;
    Guarded xq = Output(Quantized(type) ? n_rows * ldq * 4 : 4);
    bool int8 = false;
    Run(c, [&](CommandList& cl) {
      int8 = cl.UsesInt8(type);
      MatMulArgs a;
      a.w = &m;
      a.x = xv;
      a.ldx = ldx;
      if (int8) {
        QuantizeActivations(cl, type, xv, ldx, n_rows, n_in, xq.view, ldq);
        a.xq = xq.view;
        a.ldxq = ldq;
      }
      a.n_rows = n_rows;
      a.y = y.view;
      a.ldy = ldy;
      a.accumulate = accumulate;
      MatMul(cl, a);
    });
    std::vector<float> got = Read<float>(y);
    if (Quantized(type)) Read<uint32_t>(xq);  // guards

    // The twin and the bound.
    kernels::Matrix w{type, n_in, n_out, wbytes.data(), *RowBytes(type, n_in)};
    std::vector<float> want_f(n_rows * ldy, 0.0f);
    if (int8 || !Quantized(type)) {
      kernels::Activations acts;
      acts.Reserve(n_rows, n_in);
      kernels::ref::PrepareActivations(type, x.data(), n_rows, n_in, ldx, acts);
      kernels::MatMulJob job;
      job.w = w;
      job.x = &acts;
      job.n_rows = n_rows;
      job.y = want_f.data();
      job.ldy = ldy;
      kernels::ref::MatMul(job);
    } else {
      kernels::ref::MatMulDequantized(w, x.data(), n_rows, ldx, want_f.data(), ldy);
    }
    std::vector<float> wrow(n_in);
    std::vector<float> got_c, tol_want;
    std::vector<double> want, tol;
    const double gamma = int8 ? Gamma(n_in / 16 + 16) : Gamma(n_in + 16);
    for (int64_t o = 0; o < n_out; ++o) {
      DequantizeRow(type, wbytes.data() + o * w.row_bytes, wrow.data(), n_in);
      for (int64_t r = 0; r < n_rows; ++r) {
        double abs_sum = 0.0;
        for (int64_t k = 0; k < n_in; ++k) abs_sum += std::fabs(wrow[k] * x[r * ldx + k]);
        // Quantized activations differ from x by at most 1/127 of their block's largest value.
        if (int8) abs_sum *= 1.0 + 2.0 / 127;
        const double base = accumulate ? 0.25 : 0.0;
        const double v = want_f[r * ldy + o];
        got_c.push_back(got[r * ldy + o]);
        want.push_back(base + v);
        tol.push_back(gamma * abs_sum + std::fabs(v) * kUnit + (accumulate ? 2 * kUnit : 0.0));
      }
    }
    testing::ExpectWithin(got_c, want, tol, what);
    // Outside the n_out columns of each row the output keeps its initial bytes.
    for (int64_t r = 0; r + 1 < n_rows; ++r) {
      for (int64_t o = n_out; o < ldy; ++o) {
        uint32_t bits;
        std::memcpy(&bits, &got[r * ldy + o], 4);
        if (accumulate) {
          ASSERT_EQ(got[r * ldy + o], 0.25f);
        } else {
          ASSERT_EQ(bits, 0xA5A5A5A5u) << "row " << r << " col " << o;
        }
      }
    }
  }

  std::vector<PathConfig> ConfigsFor(GgmlType type) {
    std::vector<PathConfig> out;
    for (const PathConfig& c : MatConfigs()) {
      if (!Quantized(type) && c.mat_path == MatPath::kInt8) continue;
      out.push_back(c);
    }
    return out;
  }
};

TEST_F(VulkanMatMul, EveryTypeAndPathOddShapesAndRowCounts) {
  for (GgmlType type : kTypes) {
    const int64_t n_in = Quantized(type) && type >= GgmlType::kQ4_K ? 512 : 96;
    for (const PathConfig& c : ConfigsFor(type)) {
      for (int64_t n_rows : {1, 9, 32}) Check(type, n_in, 37, n_rows, c);
    }
  }
}

TEST_F(VulkanMatMul, MatricesLargerThanOneBindingAreSplitIntoPieces) {
  // The test device allows 1 MiB per binding: these matrices take 3 pieces (one row keeps the
  // pipelines those of the test above: lavapipe compiles each on first use).
  for (GgmlType type : kTypes) {
    const int64_t n_in = 512;
    const int64_t n_out = static_cast<int64_t>((2.3 * (1 << 20)) / *RowBytes(type, n_in));
    for (const PathConfig& c : ConfigsFor(type)) Check(type, n_in, n_out, 1, c);
  }
}

TEST_F(VulkanMatMul, AccumulatesIntoTheOutput) {
  for (const PathConfig& c : MatConfigs()) Check(GgmlType::kQ4_0, 256, 70, 9, c, true);
}

// QuantizeActivations against ref::QuantizeActRow: the same quants and scales (division is
// corrected to round as the CPU does; a quotient off by one ulp could still flip a tie, so up
// to 1 in 1000 quants may differ by one) and, for Q8_K, the same sums of 16.
TEST_F(VulkanMatMul, QuantizeActivationsMatchesTheCpuFormats) {
  if (!dev().info().int8_dot) GTEST_SKIP() << "no int8 dot product on this device";
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_K}) {
    const int64_t n_in = 768, n_rows = 5, ldx = 800;
    std::vector<float> x = testing::RandomFloats(rng_, n_rows * ldx, -3.0f, 3.0f);
    for (int64_t k = 256; k < 512; ++k) x[2 * ldx + k] = 0.0f;  // an all-zero block
    x[ldx + 7] = -9.0f;                                         // negative maximum
    const BufferView xv = Upload(x);
    const int64_t ldq = ActQ8RowWords(type, n_in) + 2;
    for (const PathConfig& c : ReductionConfigs(MatPath::kInt8)) {
      SCOPED_TRACE(c.Name() + " " + std::string(TypeName(type)));
      Guarded q = Output(n_rows * ldq * 4);
      Run(c, [&](CommandList& cl) {
        QuantizeActivations(cl, type, xv, ldx, n_rows, n_in, q.view, ldq);
      });
      const std::vector<uint32_t> got = Read<uint32_t>(q);
      const kernels::ActFormat fmt = kernels::ActFormatFor(type);
      const bool k_format = fmt == kernels::ActFormat::kQ8_K;
      const int64_t bs = k_format ? 256 : 32;
      int64_t diffs = 0;
      for (int64_t r = 0; r < n_rows; ++r) {
        const kernels::ref::ActRowLayout layout = kernels::ref::ActLayout(fmt, n_in);
        std::vector<uint8_t> row(layout.stride);
        const size_t scale_off = layout.scale;
        const size_t sums_off = layout.sums;
        kernels::ref::QuantizeActRow(fmt, x.data() + r * ldx, n_in, row.data());
        const auto* gq = reinterpret_cast<const int8_t*>(got.data() + r * ldq);
        for (int64_t k = 0; k < n_in; ++k) {
          const int d = gq[k] - static_cast<int8_t>(row[k]);
          ASSERT_LE(std::abs(d), 1) << "row " << r << " element " << k;
          diffs += d != 0;
        }
        for (int64_t b = 0; b < n_in / bs; ++b) {
          float want, have;
          std::memcpy(&want, row.data() + scale_off + 4 * b, 4);
          std::memcpy(&have, &got[r * ldq + n_in / 4 + b], 4);
          EXPECT_EQ(have, want) << "row " << r << " scale " << b;
        }
        if (k_format) {
          for (int64_t s = 0; s < n_in / 16; ++s) {
            int16_t want;
            std::memcpy(&want, row.data() + sums_off + 2 * s, 2);
            int sum = 0;
            for (int j = 0; j < 16; ++j) sum += gq[16 * s + j];
            EXPECT_EQ(static_cast<int32_t>(got[r * ldq + n_in / 4 + n_in / 256 + s]), sum);
            if (diffs == 0) {
              EXPECT_EQ(sum, want) << "row " << r << " sum " << s;
            }
          }
        }
      }
      EXPECT_LE(diffs, n_rows * n_in / 1000);
    }
  }
}

}  // namespace
}  // namespace crossword::vulkan
