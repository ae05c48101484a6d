// Embedding rows, RMSNorm (plain, residual, gated), per-head norm + rope, KV cache writes and
// top-k against the CPU twins, on both reduction paths, with guarded outputs.
//
// Tolerances (docs/gpu.md): u = 2^-24. Embedding rows and KV writes are exact (the same float
// operations; f16 rounding is implemented bit-exactly). A float sum evaluated as per-invocation
// sequential sums of at most m terms followed by a tree over WG invocations has error at most
// gamma_{m + log2 WG} sum |terms| (Higham eq. 3.4 applied along the longest path); a
// correctly-rounded-ish operation adds its ulps (Vulkan: division 2.5, 1/sqrt via sqrt and
// division 5, exp 3 + 2|x|). Bounds below are these sums with a few ulps of margin each.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backends/vulkan/ops.h"
#include "backends/vulkan/test_util.h"
#include "base/fp16.h"
#include "core/quant.h"
#include "kernels/ref.h"

namespace crossword::vulkan {
namespace {

using testing::Gamma;
using testing::Guarded;
using testing::kUnit;
using testing::PathConfig;
using testing::VkTest;

using VulkanOps = VkTest;

TEST_F(VulkanOps, GetRowsDequantizesEveryTypeAcrossPieces) {
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
                            GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
  for (GgmlType type : types) {
    SCOPED_TRACE(std::string(TypeName(type)));
    const int64_t n_in = 256;
    // Enough rows for 2+ pieces of the test device's 1 MiB bindings.
    const int64_t n_out = static_cast<int64_t>((1.5 * (1 << 20)) / *RowBytes(type, n_in)) + 3;
    const std::vector<uint8_t> w = testing::RandomWeightBytes(type, n_in, n_out, rng_);
    DeviceMatrix m;
    m.type = type;
    m.n_in = n_in;
    m.n_out = n_out;
    UploadMatrix(pool(), uploader(), m, w.data(), "table");
    ASSERT_GE(m.pieces.size(), 2u);
    const std::vector<int32_t> ids = {
        0,  static_cast<int32_t>(n_out - 1), 5,
        -3, static_cast<int32_t>(n_out),     static_cast<int32_t>(n_out / 2)};
    const BufferView idv = Upload(ids);
    const int64_t ldo = n_in + 7;
    Guarded out = Output(ids.size() * ldo * 4);
    Run(ReductionConfigs().back(), [&](CommandList& cl) {
      GetRows(cl, m, idv, static_cast<int64_t>(ids.size()), out.view, ldo);
    });
    const std::vector<float> got = Read<float>(out);
    std::vector<float> row(n_in);
    for (size_t t = 0; t < ids.size(); ++t) {
      const bool in_range = ids[t] >= 0 && ids[t] < n_out;
      if (in_range) DequantizeRow(type, w.data() + ids[t] * m.row_bytes, row.data(), n_in);
      for (int64_t i = 0; i < n_in; ++i) {
        const float want = in_range ? row[i] : 0.0f;
        // Q4_K/Q5_K: d1 * q - m1 may be contracted to an fma (one rounding fewer).
        ASSERT_NEAR(got[t * ldo + i], want, 4 * kUnit * (std::fabs(want) + 1e-3))
            << "id " << ids[t] << " element " << i;
      }
    }
  }
}

TEST_F(VulkanOps, RmsNormPlainResidualAndGated) {
  const int64_t n = 300, rows = 5, heads = 3, hd = 100;  // odd sizes
  for (const PathConfig& c : ReductionConfigs()) {
    SCOPED_TRACE(c.Name());
    // Plain, whole rows (ld > n), with weight.
    const int64_t ld = n + 11;
    std::vector<float> x = testing::RandomFloats(rng_, rows * ld, -2.0f, 2.0f);
    std::vector<float> w = testing::RandomFloats(rng_, n, 0.5f, 1.5f);
    std::vector<float> r = testing::RandomFloats(rng_, rows * ld);
    std::vector<float> z = testing::RandomFloats(rng_, rows * ld, -4.0f, 4.0f);
    const BufferView wv = Upload(w), rv = Upload(r), zv = Upload(z);
    Guarded xg = Output(x.size() * 4, x.data());
    Guarded yp = Output(rows * ld * 4), ya = Output(rows * ld * 4);
    Guarded xh = Output(x.size() * 4, x.data());  // per-head gated norm, in place
    Run(c, [&](CommandList& cl) {
      RmsNormArgs a;
      a.x = xg.view;
      a.ldx = ld;
      a.w = wv;
      a.y = yp.view;
      a.ldy = ld;
      a.n = n;
      a.n_rows = rows;
      RmsNorm(cl, a);
      a.mode = RmsNormArgs::kAdd;  // x += r, then norm (reads the x written above? no: new x)
      a.residual = rv;
      a.ld_res = ld;
      a.y = ya.view;
      RmsNorm(cl, a);
      RmsNormArgs gnorm;
      gnorm.mode = RmsNormArgs::kGate;
      gnorm.x = xh.view;
      gnorm.ldx = ld;
      gnorm.x_hs = hd;
      gnorm.w = wv;  // the first hd weights, shared by the heads
      gnorm.gate = zv;
      gnorm.ld_gate = ld;
      gnorm.gate_hs = hd;
      gnorm.y = xh.view;
      gnorm.ldy = ld;
      gnorm.y_hs = hd;
      gnorm.n = hd;
      gnorm.n_heads = heads;
      gnorm.n_rows = rows;
      RmsNorm(cl, gnorm);
    });
    const std::vector<float> gp = Read<float>(yp), ga = Read<float>(ya), gx = Read<float>(xg),
                             gh = Read<float>(xh);
    std::vector<float> got, got_a, got_x, got_h;
    std::vector<double> want, want_a, want_x, want_h, tol, tol_a, tol_x, tol_h;
    const double norm_tol = Gamma(n / 64 + 16) / 2 + 16 * kUnit;
    for (int64_t row = 0; row < rows; ++row) {
      std::vector<float> yr(n), xs(x.begin() + row * ld, x.begin() + row * ld + n);
      kernels::ref::RmsNorm(xs.data(), w.data(), yr.data(), n, 1e-6f);
      std::vector<float> xa(n), ya_ref(n);
      for (int64_t i = 0; i < n; ++i) xa[i] = xs[i] + r[row * ld + i];
      kernels::ref::RmsNorm(xa.data(), w.data(), ya_ref.data(), n, 1e-6f);
      for (int64_t i = 0; i < n; ++i) {
        got.push_back(gp[row * ld + i]);
        want.push_back(yr[i]);
        tol.push_back(norm_tol * std::fabs(yr[i]) + 1e-30);
        got_a.push_back(ga[row * ld + i]);
        want_a.push_back(ya_ref[i]);
        tol_a.push_back(norm_tol * std::fabs(ya_ref[i]) + 1e-30);
        got_x.push_back(gx[row * ld + i]);
        want_x.push_back(xa[i]);
        tol_x.push_back(0.0);
      }
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<float> o(hd),
            zs(z.begin() + row * ld + h * hd, z.begin() + row * ld + (h + 1) * hd);
        kernels::ref::RmsNorm(x.data() + row * ld + h * hd, w.data(), o.data(), hd, 1e-6f);
        kernels::ref::Silu(zs.data(), zs.data(), hd);
        for (int64_t i = 0; i < hd; ++i) {
          const double v = static_cast<double>(o[i]) * zs[i];
          got_h.push_back(gh[row * ld + h * hd + i]);
          want_h.push_back(v);
          const double zt = std::fabs(z[row * ld + h * hd + i]);
          tol_h.push_back((Gamma(hd / 64 + 16) / 2 + (24 + 2 * zt) * kUnit) * std::fabs(v) + 1e-30);
        }
      }
    }
    testing::ExpectWithin(got, want, tol, "RmsNorm plain " + c.Name());
    testing::ExpectWithin(got_a, want_a, tol_a, "RmsNorm residual " + c.Name());
    testing::ExpectWithin(got_x, want_x, tol_x, "residual stream x + r " + c.Name());
    testing::ExpectWithin(got_h, want_h, tol_h, "gated RmsNorm per head " + c.Name());
  }
}

TEST_F(VulkanOps, HeadNormRopeMatchesRmsNormThenRopeNeoxAtLargePositions) {
  const int n_heads = 3, hd = 96, n_rot = 16;
  const int64_t T = 4, ldx = 2 * n_heads * hd + 5, hs = 2 * hd;  // q rows with gates between
  const int64_t n_pos = 16000;  // the table (8 bytes per pair) fits the tests' 1 MiB bindings
  const std::vector<float> table = RopeTable(n_pos, n_rot, 1e7f);
  const BufferView tv = Upload(table);
  std::vector<float> w = testing::RandomFloats(rng_, hd, 0.5f, 1.5f);
  const BufferView wv = Upload(w);
  std::vector<int32_t> words = {0, 0, 15990};
  BufferView params = Params(words);
  for (const PathConfig& c : ReductionConfigs()) {
    SCOPED_TRACE(c.Name());
    std::vector<float> x = testing::RandomFloats(rng_, T * ldx, -3.0f, 3.0f);
    Guarded xg = Output(x.size() * 4, x.data());
    auto cl = Record(
        c,
        [&](CommandList& l) {
          HeadNormRopeArgs a;
          a.x = xg.view;
          a.ldx = ldx;
          a.head_stride = hs;
          a.head_dim = hd;
          a.n_heads = n_heads;
          a.n_tokens = T;
          a.norm_w = wv;
          a.rope = tv;
          a.rope_positions = n_pos;
          a.n_rot = n_rot;
          a.pos0 = DynInt::Slot(2);
          HeadNormRope(l, a);
        },
        params);
    for (int32_t pos0 : {15990, 17}) {  // replay with another position: no re-recording
      words[2] = pos0;
      SetParams(params, words);
      WriteBuffer(dev(), xg.view, x.data(), x.size() * 4);
      cl->Run();
      const std::vector<float> got_all = Read<float>(xg);
      std::vector<float> got;
      std::vector<double> want, tol;
      for (int64_t t = 0; t < T; ++t) {
        std::vector<float> row(x.begin() + t * ldx, x.begin() + (t + 1) * ldx);
        for (int h = 0; h < n_heads; ++h) {
          kernels::ref::RmsNorm(row.data() + h * hs, w.data(), row.data() + h * hs, hd, 1e-6f);
        }
        const std::vector<float> normed = row;
        kernels::ref::RopeNeox(row.data(), n_heads, hd, hs, n_rot, pos0 + t, 1e7f);
        // The norm's error (sum of hd squares: hd/64 terms per invocation and a tree of 64,
        // then sqrt and division) on each normed value, and for a rotated pair two products and
        // a sum (3 ulps) of the pair's magnitudes; the cos/sin table is the same on both sides.
        const double err = Gamma(hd / 64 + 16) / 2 + 24 * kUnit;
        for (int64_t i = 0; i < ldx; ++i) {
          got.push_back(got_all[t * ldx + i]);
          want.push_back(row[i]);
          const int64_t d = i % hs;
          const bool in_head = d < hd && i < n_heads * hs;
          double mag = std::fabs(normed[i]);
          if (in_head && d < n_rot) {
            const int64_t partner = d < n_rot / 2 ? i + n_rot / 2 : i - n_rot / 2;
            mag += std::fabs(normed[partner]);
          }
          tol.push_back(in_head ? err * mag : 0.0);
        }
      }
      testing::ExpectWithin(got, want, tol, "HeadNormRope pos0 " + std::to_string(pos0));
    }
  }
}

TEST_F(VulkanOps, KvWriteRoundsToF16AtTheReplayedPosition) {
  const int64_t row = 40, T = 3, n_ctx = 16, ld = 45;
  std::vector<float> k = testing::RandomFloats(rng_, T * ld, -70000.0f, 70000.0f);
  std::vector<float> v = testing::RandomFloats(rng_, T * ld, -1e-6f, 1e-6f);  // subnormal halves
  k[3] = 65519.0f;  // rounds to 65504 vs inf boundary
  k[4] = 65520.0f;
  const BufferView kv = Upload(k), vv = Upload(v);
  std::vector<int32_t> words = {5};
  BufferView params = Params(words);
  Guarded kc = Output(n_ctx * row * 2), vc = Output(n_ctx * row * 2);
  auto cl = Record(
      ReductionConfigs().back(),
      [&](CommandList& l) {
        KvWrite(l, kv, ld, vv, ld, T, row, DynInt::Slot(0), kc.view, vc.view, n_ctx);
      },
      params);
  for (int32_t pos : {5, 14}) {  // 14: the last token falls past n_ctx and is dropped
    words[0] = pos;
    SetParams(params, words);
    cl->Run();
    const std::vector<uint16_t> gk = Read<uint16_t>(kc), gv = Read<uint16_t>(vc);
    for (int64_t t = 0; t < T; ++t) {
      if (pos + t >= n_ctx) continue;
      for (int64_t i = 0; i < row; ++i) {
        ASSERT_EQ(gk[(pos + t) * row + i], F32ToF16(k[t * ld + i])) << t << " " << i;
        ASSERT_EQ(gv[(pos + t) * row + i], F32ToF16(v[t * ld + i])) << t << " " << i;
      }
    }
  }
  // Rows never written keep the sentinel.
  const std::vector<uint16_t> gk = Read<uint16_t>(kc);
  EXPECT_EQ(gk[0], 0xA5A5);
  EXPECT_EQ(gk[4 * row], 0xA5A5);
}

TEST_F(VulkanOps, TopKIdsValuesAndProbabilitiesMatchASortAndSoftmax) {
  for (const PathConfig& c : ReductionConfigs()) {
    for (auto [n_vocab, k] : {std::pair<int64_t, int>{5000, 40}, {70001, 1}, {300, 64}}) {
      SCOPED_TRACE(c.Name() + " vocab " + std::to_string(n_vocab) + " k " + std::to_string(k));
      const int64_t rows = 2, ld = n_vocab + 3;
      const float temp = 0.7f;
      std::vector<float> logits = testing::RandomFloats(rng_, rows * ld, -8.0f, 8.0f);
      logits[ld + 17] = NAN;           // never selected
      logits[11] = logits[12] = 9.5f;  // a tie: the lower id first
      const BufferView lv = Upload(logits);
      Guarded ids = Output(rows * k * 4), vals = Output(rows * k * 4), probs = Output(rows * k * 4),
              stats = Output(rows * 8);
      BufferView scratch = pool().Allocate(TopKScratchFloats(rows, n_vocab, k) * 4, "scratch");
      Run(c, [&](CommandList& cl) {
        TopKArgs a;
        a.logits = lv;
        a.ld = ld;
        a.n_rows = rows;
        a.n_vocab = n_vocab;
        a.k = k;
        a.temperature = temp;
        a.scratch = scratch;
        a.ids = ids.view;
        a.values = vals.view;
        a.probs = probs.view;
        a.stats = stats.view;
        TopK(cl, a);
      });
      const std::vector<int32_t> gi = Read<int32_t>(ids);
      const std::vector<float> gv = Read<float>(vals), gp = Read<float>(probs),
                               gs = Read<float>(stats);
      for (int64_t r = 0; r < rows; ++r) {
        const float* l = logits.data() + r * ld;
        std::vector<int32_t> order(n_vocab);
        std::iota(order.begin(), order.end(), 0);
        auto key = [&](int32_t i) { return std::isnan(l[i]) ? -INFINITY : l[i]; };
        std::stable_sort(order.begin(), order.end(),
                         [&](int32_t a, int32_t b) { return key(a) > key(b); });
        double mx = key(order[0]), sum = 0.0;
        for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp((key(i) - mx) / temp);
        std::vector<float> got_p;
        std::vector<double> want_p, tol_p;
        for (int j = 0; j < k; ++j) {
          ASSERT_EQ(gi[r * k + j], order[j]) << "row " << r << " rank " << j;
          ASSERT_EQ(gv[r * k + j], l[order[j]]);
          const double p = std::exp((l[order[j]] - mx) / temp) / sum;
          got_p.push_back(gp[r * k + j]);
          want_p.push_back(p);
          // exp of arguments up to 16/temp (3 + 2|x| ulps), the sum's tree (EPT <= 64 terms per
          // invocation, two trees of 256, the chunks) and the division.
          tol_p.push_back((Gamma(64 + 16 + 16 + 300) + (8 + 2 * 16 / temp) * kUnit) * 2 * p);
        }
        testing::ExpectWithin(got_p, want_p, tol_p, "TopK probabilities");
        EXPECT_EQ(gs[2 * r], static_cast<float>(mx));
        EXPECT_NEAR(gs[2 * r + 1], sum, (Gamma(64 + 16 + 16 + 300) + 8 * kUnit) * sum);
      }
    }
  }
}

}  // namespace
}  // namespace crossword::vulkan
