// The MoE block on the GPU: router mat-vec, MoeRoute, MoeGroup, grouped gate/up + SwiGLU
// (routed and the dense shared expert), grouped down, MoeCombine into the residual stream, all
// in one recording; every stage is checked against its CPU twin applied to the previous
// stage's GPU output (model MoeLayer's math; kernels TopKSoftmax, MatMul, SiluMul), with
// random and clustered routing, 1 and 32 tokens, expert stacks split into pieces.
//
// Tolerances (docs/gpu.md): a dot product over n inputs as in vk_matmul_test (gamma of the
// longest float-sum path times sum |w x|); silu(g) * u adds |silu'| <= 1.1 times g's bound
// times |u|, |silu(g)| times u's bound, and the exp / division ulps (10 + 2|g|); router weights
// p / sum p carry the softmax's exp ulps (3 + 2|l - max|), its sum tree and two divisions;
// the combine sums k + 1 products (gamma_{k+2}) plus the shared gate's dot product.
#include <gtest/gtest.h>

#include <algorithm>
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

// y = W x for one weight row (host twin of the path in use) and the bound's sum |w x|.
struct Dot {
  double value, abs;
};

class VulkanMoe : public VkTest {
 protected:
  static constexpr int kExperts = 16, kUsed = 4;
  static constexpr int64_t kEmbd = 256;

  // Rows [row0, row0 + n) of `w` (type, n_in) times activation rows of x (f32, ld n_in):
  // the int8 path's twin (ref::MatMul on ref::PrepareActivations) or the float path's.
  std::vector<Dot> Dots(GgmlType type, int64_t n_in, const uint8_t* rows, int64_t n, const float* x,
                        int64_t n_x, bool int8) {
    const size_t rb = *RowBytes(type, n_in);
    kernels::Matrix w{type, n_in, n, rows, rb};
    std::vector<float> y(n_x * n);
    if (int8) {
      kernels::Activations acts;
      acts.Reserve(n_x, n_in);
      kernels::ref::PrepareActivations(type, x, n_x, n_in, n_in, acts);
      kernels::MatMulJob job;
      job.w = w;
      job.x = &acts;
      job.n_rows = n_x;
      job.y = y.data();
      job.ldy = n;
      kernels::ref::MatMul(job);
    } else {
      kernels::ref::MatMulDequantized(w, x, n_x, n_in, y.data(), n);
    }
    std::vector<Dot> out(n_x * n);
    std::vector<float> deq(n_in);
    for (int64_t o = 0; o < n; ++o) {
      DequantizeRow(type, rows + o * rb, deq.data(), n_in);
      for (int64_t r = 0; r < n_x; ++r) {
        double a = 0.0;
        for (int64_t i = 0; i < n_in; ++i) a += std::fabs(deq[i] * x[r * n_in + i]);
        out[r * n + o] = {y[r * n + o], int8 ? a * (1.0 + 2.0 / 127) : a};
      }
    }
    return out;
  }
  double DotGamma(int64_t n_in, bool int8) {
    return int8 ? Gamma(n_in / 16 + 16) : Gamma(n_in + 16);
  }

  void Block(GgmlType type, int64_t n_ff, int64_t T, bool clustered, const PathConfig& c) {
    const std::string what = fmt::format("{} n_ff {} T {} {} {}", TypeName(type), n_ff, T,
                                         clustered ? "clustered" : "random", c.Name());
    SCOPED_TRACE(what);
    const int E = kExperts, k = kUsed;
    const int64_t D = kEmbd;
    const size_t rb_in = *RowBytes(type, D), rb_ff = *RowBytes(type, n_ff);
    // Weights: router F32 [E][D]; gate/up stack [E][2 n_ff][D]; down [E][D][n_ff]; shared.
    std::vector<float> router = testing::RandomFloats(rng_, E * D, -0.2f, 0.2f);
    if (clustered) {  // every token prefers experts 3, 7, 8, 12
      for (int e : {3, 7, 8, 12}) {
        for (int64_t i = 0; i < D; ++i) router[e * D + i] = 0.0f;
      }
    }
    const std::vector<uint8_t> gu = testing::RandomWeightBytes(type, D, E * 2 * n_ff, rng_);
    const std::vector<uint8_t> dn = testing::RandomWeightBytes(type, n_ff, E * D, rng_);
    const std::vector<uint8_t> sgu = testing::RandomWeightBytes(type, D, 2 * n_ff, rng_);
    const std::vector<uint8_t> sdn = testing::RandomWeightBytes(type, n_ff, D, rng_);
    const std::vector<float> shared_gate = testing::RandomFloats(rng_, D, -0.1f, 0.1f);
    std::vector<float> f = testing::RandomFloats(rng_, T * D);
    if (clustered) {  // logits of the preferred experts: 20 + 0.01 e, the others about +-2
      for (int64_t t = 0; t < T; ++t) f[t * D] = 1.0f;
      for (int e : {3, 7, 8, 12}) router[e * D] = 20.0f + 0.01f * e;
    }
    std::vector<float> y0 = testing::RandomFloats(rng_, T * D);  // the residual stream

    DeviceMatrix mr = DeviceMatrix::Of(GgmlType::kF32, D, E),
                 mgu = DeviceMatrix::Of(type, D, 2 * n_ff, E),
                 mdn = DeviceMatrix::Of(type, n_ff, D, E),
                 msgu = DeviceMatrix::Of(type, D, 2 * n_ff), msdn = DeviceMatrix::Of(type, n_ff, D);
    UploadMatrix(pool(), uploader(), mr, router.data(), "router");
    // gu is already [E][gate n_ff rows; up n_ff rows]: upload as a plain stack.
    UploadMatrix(pool(), uploader(), mgu, gu.data(), "gate_up");
    UploadMatrix(pool(), uploader(), mdn, dn.data(), "down");
    UploadGateUp(pool(), uploader(), msgu, sgu.data(), sgu.data() + n_ff * rb_in, "shexp");
    UploadMatrix(pool(), uploader(), msdn, sdn.data(), "shexp down");
    const BufferView fv = Upload(f), sgv = Upload(shared_gate);
    const MoeGroupLayout lay = MoeGroupLayoutFor(T, k, E);
    const int64_t ldq = ActQ8RowWords(type, std::max(D, n_ff));
    Guarded logits = Output(T * E * 4), ids = Output(T * k * 4), wts = Output(T * k * 4),
            grp = Output(lay.words * 4), h = Output(T * k * n_ff * 4), hs = Output(T * n_ff * 4),
            down = Output(T * k * D * 4), sh = Output(T * D * 4), y = Output(T * D * 4, y0.data());
    BufferView fq = pool().Allocate(T * ldq * 4, "fq"), hq = pool().Allocate(T * k * ldq * 4, "hq"),
               hsq = pool().Allocate(T * ldq * 4, "hsq");
    bool int8 = false;
    Run(c, [&](CommandList& cl) {
      int8 = cl.UsesInt8(type);
      MatMulArgs r;
      r.w = &mr;
      r.x = fv;
      r.ldx = D;
      r.n_rows = T;
      r.y = logits.view;
      r.ldy = E;
      MatMul(cl, r);
      MoeRoute(cl, logits.view, E, T, E, k, ids.view, wts.view);
      MoeGroup(cl, ids.view, T, k, E, grp.view);
      if (int8) QuantizeActivations(cl, type, fv, D, T, D, fq, ldq);
      MoeGateUpArgs g;
      g.gate_up = &mgu;
      g.x = fv;
      g.ldx = D;
      g.xq = fq;
      g.ldxq = ldq;
      g.n_tokens = T;
      g.k = k;
      g.group = grp.view;
      g.h = h.view;
      g.ldh = n_ff;
      MoeGateUp(cl, g);
      g.gate_up = &msgu;
      g.dense = true;
      g.h = hs.view;
      MoeGateUp(cl, g);
      if (int8) {
        QuantizeActivations(cl, type, h.view, n_ff, T * k, n_ff, hq, ldq);
        QuantizeActivations(cl, type, hs.view, n_ff, T, n_ff, hsq, ldq);
      }
      MoeDownArgs d;
      d.down = &mdn;
      d.h = h.view;
      d.ldh = n_ff;
      d.hq = hq;
      d.ldhq = ldq;
      d.n_tokens = T;
      d.k = k;
      d.group = grp.view;
      d.out = down.view;
      d.ldo = D;
      MoeDown(cl, d);
      d.down = &msdn;
      d.dense = true;
      d.h = hs.view;
      d.hq = hsq;
      d.out = sh.view;
      MoeDown(cl, d);
      MoeCombineArgs m;
      m.down = down.view;
      m.ld_down = D;
      m.weights = wts.view;
      m.k = k;
      m.shared = sh.view;
      m.ld_shared = D;
      m.shared_gate_w = sgv;
      m.f = fv;
      m.ldf = D;
      m.y = y.view;
      m.ldy = D;
      m.n_tokens = T;
      m.n_embd = D;
      m.accumulate = true;
      MoeCombine(cl, m);
    });
    if (mgu.bytes() > dev().max_binding_bytes()) {
      ASSERT_GE(mgu.pieces.size(), 2u) << "the gate/up stack should span several bindings";
    }
    const std::vector<float> g_logits = Read<float>(logits), g_w = Read<float>(wts),
                             g_h = Read<float>(h), g_hs = Read<float>(hs),
                             g_down = Read<float>(down), g_sh = Read<float>(sh),
                             g_y = Read<float>(y);
    const std::vector<int32_t> g_ids = Read<int32_t>(ids), g_grp = Read<int32_t>(grp);

    // Router logits (F32 mat-vec, float path).
    {
      const std::vector<Dot> want =
          Dots(GgmlType::kF32, D, reinterpret_cast<uint8_t*>(router.data()), E, f.data(), T, false);
      std::vector<double> wv, tol;
      for (const Dot& d : want) {
        wv.push_back(d.value);
        tol.push_back(DotGamma(D, false) * d.abs + std::fabs(d.value) * kUnit);
      }
      testing::ExpectWithin(g_logits, wv, tol, "router logits " + what);
    }
    // Routing on the GPU's logits: the same ids; weights within the softmax bound.
    std::vector<int32_t> want_ids(T * k);
    {
      std::vector<float> want_w(T * k);
      std::vector<double> wv, tol;
      for (int64_t t = 0; t < T; ++t) {
        kernels::ref::TopKSoftmax(g_logits.data() + t * E, E, k, want_ids.data() + t * k,
                                  want_w.data() + t * k);
        const float mx =
            *std::max_element(g_logits.begin() + t * E, g_logits.begin() + (t + 1) * E);
        const float mn =
            *std::min_element(g_logits.begin() + t * E, g_logits.begin() + (t + 1) * E);
        for (int j = 0; j < k; ++j) {
          wv.push_back(want_w[t * k + j]);
          tol.push_back((2 * Gamma(E / 8 + 16) + (16 + 4 * (mx - mn)) * kUnit) * want_w[t * k + j]);
        }
      }
      ASSERT_EQ(g_ids, want_ids);
      testing::ExpectWithin(g_w, wv, tol, "router weights " + what);
    }
    // Grouping: recompute it from the ids.
    std::vector<int> first(E, -1), count(E, 0);
    {
      for (int32_t e : want_ids) ++count[e];
      int active = 0, run = 0;
      for (int e = 0; e < E; ++e) {
        first[e] = run;
        if (count[e] > 0) {
          EXPECT_EQ(g_grp[lay.active + 3 * active], e);
          EXPECT_EQ(g_grp[lay.active + 3 * active + 1], run);
          EXPECT_EQ(g_grp[lay.active + 3 * active + 2], count[e]);
          ++active;
        }
        run += count[e];
      }
      EXPECT_EQ(g_grp[0], active);
      if (clustered) {
        EXPECT_EQ(active, 4);  // the pass reads only the 4 preferred experts
      }
      std::vector<int> seen(E, 0);
      for (int64_t p = 0; p < T * k; ++p) {
        const int e = want_ids[p];
        const int pos = first[e] + seen[e]++;
        EXPECT_EQ(g_grp[lay.pair_token + pos], p / k);
        EXPECT_EQ(g_grp[lay.pair_row + pos], p);
      }
    }
    // gate/up + SwiGLU: routed rows t*k + j and the shared expert's rows t.
    auto check_h = [&](const uint8_t* stack, const std::vector<float>& got, bool dense) {
      std::vector<float> gv;
      std::vector<double> wv, tol;
      for (int64_t t = 0; t < T; ++t) {
        for (int j = 0; j < (dense ? 1 : k); ++j) {
          const int e = dense ? 0 : want_ids[t * k + j];
          const uint8_t* rows = stack + static_cast<size_t>(e) * 2 * n_ff * rb_in;
          const std::vector<Dot> g = Dots(type, D, rows, n_ff, f.data() + t * D, 1, int8);
          const std::vector<Dot> u =
              Dots(type, D, rows + n_ff * rb_in, n_ff, f.data() + t * D, 1, int8);
          const int64_t row = dense ? t : t * k + j;
          for (int64_t i = 0; i < n_ff; ++i) {
            const double gi = g[i].value, ui = u[i].value, s = gi / (1.0 + std::exp(-gi));
            const double tg = DotGamma(D, int8) * g[i].abs + std::fabs(gi) * kUnit;
            const double tu = DotGamma(D, int8) * u[i].abs + std::fabs(ui) * kUnit;
            gv.push_back(got[row * n_ff + i]);
            wv.push_back(s * ui);
            tol.push_back(1.1 * tg * std::fabs(ui) + std::fabs(s) * tu +
                          (10 + 2 * std::fabs(gi)) * kUnit * std::fabs(s * ui) + 1e-30);
          }
        }
      }
      testing::ExpectWithin(gv, wv, tol, std::string(dense ? "shared" : "routed") + " h " + what);
    };
    check_h(gu.data(), g_h, false);
    std::vector<uint8_t> sgu_stack(2 * n_ff * rb_in);
    std::memcpy(sgu_stack.data(), sgu.data(), sgu_stack.size());
    check_h(sgu_stack.data(), g_hs, true);
    // down on the GPU's h.
    auto check_down = [&](const std::vector<float>& hin, const uint8_t* stack,
                          const std::vector<float>& got, bool dense) {
      std::vector<float> gv;
      std::vector<double> wv, tol;
      for (int64_t t = 0; t < T; ++t) {
        for (int j = 0; j < (dense ? 1 : k); ++j) {
          const int e = dense ? 0 : want_ids[t * k + j];
          const int64_t row = dense ? t : t * k + j;
          const std::vector<Dot> d = Dots(type, n_ff, stack + static_cast<size_t>(e) * D * rb_ff, D,
                                          hin.data() + row * n_ff, 1, int8);
          for (int64_t i = 0; i < D; ++i) {
            gv.push_back(got[row * D + i]);
            wv.push_back(d[i].value);
            tol.push_back(DotGamma(n_ff, int8) * d[i].abs + std::fabs(d[i].value) * kUnit);
          }
        }
      }
      testing::ExpectWithin(gv, wv, tol,
                            std::string(dense ? "shared" : "routed") + " down " + what);
    };
    check_down(g_h, dn.data(), g_down, false);
    check_down(g_hs, sdn.data(), g_sh, true);
    // Combine on the GPU's down / shared outputs and weights.
    {
      std::vector<double> wv, tol;
      for (int64_t t = 0; t < T; ++t) {
        double dot = 0.0, dot_abs = 0.0;
        for (int64_t i = 0; i < D; ++i) {
          dot += static_cast<double>(shared_gate[i]) * f[t * D + i];
          dot_abs += std::fabs(shared_gate[i] * f[t * D + i]);
        }
        const double sg = 1.0 / (1.0 + std::exp(-dot));
        const double tsg = (Gamma(D / 256 + 16) * dot_abs + 8 * kUnit) * 0.25 + 8 * kUnit * sg;
        for (int64_t i = 0; i < D; ++i) {
          double acc = 0.0, abs = 0.0;
          for (int j = 0; j < k; ++j) {
            acc += static_cast<double>(g_w[t * k + j]) * g_down[(t * k + j) * D + i];
            abs += std::fabs(g_w[t * k + j] * g_down[(t * k + j) * D + i]);
          }
          acc += sg * g_sh[t * D + i];
          abs += std::fabs(sg * g_sh[t * D + i]) + std::fabs(y0[t * D + i]);
          wv.push_back(y0[t * D + i] + acc);
          tol.push_back(Gamma(k + 4) * abs + tsg * std::fabs(g_sh[t * D + i]));
        }
      }
      testing::ExpectWithin(g_y, wv, tol, "combine " + what);
    }
  }
};

TEST_F(VulkanMoe, RouteMatchesTopKSoftmaxOnOddShapes) {
  for (const PathConfig& c : ReductionConfigs()) {
    for (auto [n_expert, k] : {std::pair<int, int>{256, 8}, {20, 3}, {1000, 16}}) {
      SCOPED_TRACE(c.Name() + " experts " + std::to_string(n_expert));
      const int64_t T = 7, ld = n_expert + 1;
      std::vector<float> logits = testing::RandomFloats(rng_, T * ld, -4.0f, 4.0f);
      logits[5] = logits[6] = 4.5f;  // a tie: the lower id first
      const BufferView lv = Upload(logits);
      Guarded ids = Output(T * k * 4), w = Output(T * k * 4);
      Run(c, [&](CommandList& cl) { MoeRoute(cl, lv, ld, T, n_expert, k, ids.view, w.view); });
      const std::vector<int32_t> gi = Read<int32_t>(ids);
      const std::vector<float> gw = Read<float>(w);
      std::vector<double> want, tol;
      for (int64_t t = 0; t < T; ++t) {
        std::vector<int32_t> wi(k);
        std::vector<float> ww(k);
        kernels::ref::TopKSoftmax(logits.data() + t * ld, n_expert, k, wi.data(), ww.data());
        for (int j = 0; j < k; ++j) {
          ASSERT_EQ(gi[t * k + j], wi[j]) << "token " << t << " rank " << j;
          want.push_back(ww[j]);
          tol.push_back((2 * Gamma(n_expert / 8 + 16) + (16 + 4 * 9.0) * kUnit) * ww[j]);
        }
      }
      testing::ExpectWithin(gw, want, tol, "MoeRoute " + c.Name());
    }
  }
}

// Each type on one reduction path per mat-vec path keeps the pipelines few (lavapipe compiles
// each on first use); the reduction code is the same for every type (mmv_core.glsl), and Q4_K
// runs on every combination.
TEST_F(VulkanMoe, BlockQ4KEveryPathRandomAndClusteredRouting) {
  for (const PathConfig& c : MatConfigs()) {
    Block(GgmlType::kQ4_K, 256, 1, false, c);
    Block(GgmlType::kQ4_K, 256, 32, c.reduction == Reduction::kShared, c);
  }
}

TEST_F(VulkanMoe, BlockQ4_0AndF16) {
  const Reduction first = ReductionConfigs()[0].reduction;  // subgroup where available
  for (const PathConfig& c : MatConfigs()) {
    const Reduction want = c.mat_path == MatPath::kInt8 ? Reduction::kShared : first;
    if (c.reduction != want) continue;
    Block(GgmlType::kQ4_0, 96, 32, true, c);
    if (c.mat_path == MatPath::kFloat) Block(GgmlType::kF16, 64, 32, false, c);
  }
}

}  // namespace
}  // namespace crossword::vulkan
