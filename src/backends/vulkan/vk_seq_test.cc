// Gated DeltaNet ops (gates, conv1d + SiLU + L2, the recurrence with recording, replay of a
// shorter T through a parameter slot, conv-window rollback) and attention (decode, causal
// block, bidirectional block, GQA, splits, output gate) against the CPU twins.
//
// Tolerances (docs/gpu.md): elementwise functions carry their Vulkan ulp allowances (exp
// 3 + 2|x|, log 3, division 2.5); a sum over a path of m float additions gamma_m sum |terms|.
// The recurrence's bound is a running error bound carried through the tokens next to the
// double-precision twin: the state's bound decays with the state and grows by the roundings
// of each update and by |k| times the delta's bound (see StateBound below).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/vulkan/ops.h"
#include "backends/vulkan/test_util.h"
#include "base/fp16.h"
#include "kernels/ref.h"

namespace crossword::vulkan {
namespace {

using testing::Gamma;
using testing::Guarded;
using testing::kUnit;
using testing::PathConfig;
using testing::VkTest;

using VulkanSeq = VkTest;

TEST_F(VulkanSeq, GdnGates) {
  const int64_t T = 5, n_v = 37, ldb = 80, lda = 90, ldg = 40;
  std::vector<float> b = testing::RandomFloats(rng_, T * ldb, -8.0f, 8.0f);
  std::vector<float> a = testing::RandomFloats(rng_, T * lda, -30.0f, 30.0f);  // both softplus arms
  std::vector<float> dt = testing::RandomFloats(rng_, n_v, -1.0f, 1.0f);
  std::vector<float> sa = testing::RandomFloats(rng_, n_v, -3.0f, -0.01f);
  const BufferView bv = Upload(b), av = Upload(a), dv = Upload(dt), sv = Upload(sa);
  Guarded g = Output(T * ldg * 4), beta = Output(T * ldg * 4);
  Run(ReductionConfigs().back(), [&](CommandList& cl) {
    GdnGates(cl, bv, ldb, av, lda, dv, sv, T, n_v, g.view, beta.view, ldg);
  });
  const std::vector<float> gg = Read<float>(g), gb = Read<float>(beta);
  std::vector<float> got_g, got_b;
  std::vector<double> want_g, want_b, tol_g, tol_b;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> x(n_v), sp(n_v), sg(n_v);
    kernels::ref::Add(a.data() + t * lda, dt.data(), x.data(), n_v);
    kernels::ref::Softplus(x.data(), sp.data(), n_v);
    kernels::ref::Mul(sp.data(), sa.data(), sp.data(), n_v);
    kernels::ref::Sigmoid(b.data() + t * ldb, sg.data(), n_v);
    for (int64_t h = 0; h < n_v; ++h) {
      got_g.push_back(gg[t * ldg + h]);
      want_g.push_back(sp[h]);
      // exp (3 + 2|x| ulps) feeding log1p (an atanh series: a division and ~12 roundings).
      tol_g.push_back((16 + 2 * std::fabs(x[h])) * kUnit * std::fabs(sp[h]) + 1e-30);
      got_b.push_back(gb[t * ldg + h]);
      want_b.push_back(sg[h]);
      tol_b.push_back((8 + 2 * std::fabs(b[t * ldb + h])) * kUnit * sg[h]);
    }
  }
  testing::ExpectWithin(got_g, want_g, tol_g, "g");
  testing::ExpectWithin(got_b, want_b, tol_b, "beta");
}

TEST_F(VulkanSeq, Conv1dSiluL2WithStateAndRollback) {
  const int K = 4;
  const int64_t hd = 32, C = 5 * hd, T = 6, ldx = C + 3, ldy = C + 1, n_l2 = 3;
  std::vector<float> x = testing::RandomFloats(rng_, T * ldx, -2.0f, 2.0f);
  std::vector<float> w = testing::RandomFloats(rng_, C * K);
  std::vector<float> st = testing::RandomFloats(rng_, (K - 1) * C, -2.0f, 2.0f);
  const BufferView xv = Upload(x), wv = Upload(w);
  std::vector<int32_t> words = {3};
  BufferView params = Params(words);
  for (const PathConfig& c : ReductionConfigs()) {
    SCOPED_TRACE(c.Name());
    Guarded state = Output(st.size() * 4, st.data()), y = Output(T * ldy * 4),
            rec = Output(st.size() * 4), rolled = Output(st.size() * 4);
    Run(
        c,
        [&](CommandList& cl) {
          Conv1dArgs a;
          a.x = xv;
          a.ldx = ldx;
          a.T = T;
          a.C = C;
          a.K = K;
          a.w = wv;
          a.state_in = a.state_out = state.view;  // in place
          a.state0_record = rec.view;
          a.y = y.view;
          a.ldy = ldy;
          a.head_dim = hd;
          a.n_l2_heads = n_l2;
          CausalConv1dSiluL2(cl, a);
          ConvStateRollback(cl, rec.view, xv, ldx, C, K, DynInt::Slot(0), T, rolled.view);
        },
        params);
    // Twin: conv + silu, then L2 on the first n_l2 heads.
    std::vector<float> ref_state = st, ref_y(T * ldy, 0.0f);
    kernels::Conv1dArgs r;
    r.x = x.data();
    r.ldx = ldx;
    r.T = T;
    r.C = C;
    r.K = K;
    r.w = w.data();
    r.state = ref_state.data();
    r.y = ref_y.data();
    r.ldy = ldy;
    kernels::ref::CausalConv1dSilu(r);
    const std::vector<float> gy = Read<float>(y), gs = Read<float>(state), gr = Read<float>(rec),
                             groll = Read<float>(rolled);
    std::vector<float> got;
    std::vector<double> want, tol;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < C / hd; ++h) {
        float* yh = ref_y.data() + t * ldy + h * hd;
        std::vector<float> pre(yh, yh + hd);
        if (h < n_l2) kernels::ref::L2Norm(yh, hd, 1e-6f);
        double ss = 0.0;
        for (float v : pre) ss += static_cast<double>(v) * v;
        const double scale = h < n_l2 ? 1.0 / std::max(std::sqrt(ss), 1e-6) : 1.0;
        for (int64_t i = 0; i < hd; ++i) {
          const int64_t ch = h * hd + i;
          double abs = 0.0;  // sum |X w| of the conv
          for (int j = 0; j < K; ++j) {
            const int64_t row = t + j;
            const float xv_ = row < K - 1 ? st[row * C + ch] : x[(row - (K - 1)) * ldx + ch];
            abs += std::fabs(xv_ * w[ch * K + j]);
          }
          got.push_back(gy[t * ldy + ch]);
          want.push_back(yh[i]);
          tol.push_back(1.1 * Gamma(K + 2) * abs * scale +
                        (Gamma(hd / 8 + 8) / 2 + (16 + 2 * abs) * kUnit) * std::fabs(yh[i]) +
                        1e-30);
        }
      }
    }
    testing::ExpectWithin(got, want, tol, "conv y " + c.Name());
    for (size_t i = 0; i < st.size(); ++i) {
      ASSERT_EQ(gs[i], ref_state[i]) << "state " << i;
      ASSERT_EQ(gr[i], st[i]) << "recorded state " << i;
    }
    // Rollback to 3 kept tokens: the window ending at token 2.
    for (int64_t r2 = 0; r2 < K - 1; ++r2) {
      const int64_t src = 3 - (K - 1) + r2;
      for (int64_t ch = 0; ch < C; ++ch) {
        const float want_v = src >= 0 ? x[src * ldx + ch] : st[(K - 1 + src) * C + ch];
        ASSERT_EQ(groll[r2 * C + ch], want_v) << r2 << " " << ch;
      }
    }
  }
}

// The double-precision twin of the recurrence with a running error bound for the GPU's float
// evaluation (LANES invocations per state row: dk / LANES sequential terms, log2 LANES levels).
struct StateBound {
  int n_k, n_v;
  int64_t dk, dv;
  std::vector<double> S, E;  // state and its error bound, [hv][j][i]
  double scale;

  StateBound(int nk, int nv, int64_t k_, int64_t v_, const std::vector<float>& s0)
      : n_k(nk), n_v(nv), dk(k_), dv(v_), S(s0.begin(), s0.end()), E(s0.size(), 0.0) {
    scale = 1.0f / std::sqrt(static_cast<float>(dk));
  }
  // One token: q, k [n_k][dk] (l2-normed), v [n_v][dv], g, beta [n_v]; out o and its bound.
  void Step(const float* q, const float* k, const float* v, const float* g, const float* beta,
            std::vector<double>& o, std::vector<double>& o_err) {
    const double gs = Gamma(dk / 8 + 3 + 2);  // per-lane sums + shuffle tree + the fused form
    o.assign(n_v * dv, 0.0);
    o_err.assign(n_v * dv, 0.0);
    for (int hv = 0; hv < n_v; ++hv) {
      const int hk = hv % n_k;
      const float* kh = k + hk * dk;
      const float* qh = q + hk * dk;
      const double decay = std::exp(static_cast<double>(g[hv]));
      const double decay_rel = (3 + 2 * std::fabs(g[hv])) * kUnit;
      double kq = 0.0, kq_abs = 0.0;
      for (int64_t i = 0; i < dk; ++i) {
        kq += static_cast<double>(kh[i]) * qh[i];
        kq_abs += std::fabs(kh[i] * qh[i]);
      }
      for (int64_t j = 0; j < dv; ++j) {
        double* s = &S[(hv * dv + j) * dk];
        double* e = &E[(hv * dv + j) * dk];
        double kv = 0.0, sq = 0.0, kv_abs = 0.0, sq_abs = 0.0, kv_err = 0.0, sq_err = 0.0;
        for (int64_t i = 0; i < dk; ++i) {
          e[i] = e[i] * decay + std::fabs(s[i] * decay) * (decay_rel + kUnit);
          s[i] *= decay;
          kv += s[i] * kh[i];
          sq += s[i] * qh[i];
          kv_abs += std::fabs(s[i] * kh[i]);
          sq_abs += std::fabs(s[i] * qh[i]);
          kv_err += e[i] * std::fabs(kh[i]);
          sq_err += e[i] * std::fabs(qh[i]);
        }
        kv_err += gs * kv_abs;
        sq_err += gs * sq_abs;
        const double d = (v[hv * dv + j] - kv) * beta[hv];
        const double d_err =
            beta[hv] * kv_err + 2 * kUnit * (std::fabs(v[hv * dv + j]) + std::fabs(kv)) * beta[hv];
        for (int64_t i = 0; i < dk; ++i) {
          e[i] += std::fabs(kh[i]) * d_err + 2 * kUnit * (std::fabs(s[i]) + std::fabs(kh[i] * d));
          s[i] += kh[i] * d;
        }
        o[hv * dv + j] = scale * (sq + d * kq);
        o_err[hv * dv + j] = scale * (sq_err + std::fabs(d) * gs * kq_abs + d_err * std::fabs(kq) +
                                      3 * kUnit * (std::fabs(sq) + std::fabs(d * kq))) +
                             kUnit * std::fabs(o[hv * dv + j]);
      }
    }
  }
};

TEST_F(VulkanSeq, GatedDeltaRuleRecordsAndReplaysAShorterPass) {
  const int n_k = 2, n_v = 4;
  const int64_t dk = 48, dv = 40, T = 5;  // dk: 6 entries per lane; dv: a partial workgroup
  const int64_t ldq = n_k * dk + 3, ldv = n_v * dv + 1, ldg = n_v + 2, ldo = n_v * dv + 5;
  std::vector<float> q(T * ldq), k(T * ldq), v = testing::RandomFloats(rng_, T * ldv);
  for (auto* m : {&q, &k}) {
    *m = testing::RandomFloats(rng_, T * ldq);
    for (int64_t t = 0; t < T; ++t) {
      for (int h = 0; h < n_k; ++h) kernels::ref::L2Norm(m->data() + t * ldq + h * dk, dk, 1e-6f);
    }
  }
  std::vector<float> g = testing::RandomFloats(rng_, T * ldg, -2.0f, -0.01f);
  std::vector<float> beta = testing::RandomFloats(rng_, T * ldg, 0.05f, 0.95f);
  std::vector<float> s0 = testing::RandomFloats(rng_, n_v * dv * dk, -0.5f, 0.5f);
  const BufferView qv = Upload(q), kv = Upload(k), vv = Upload(v), gv = Upload(g),
                   bv = Upload(beta);
  std::vector<int32_t> words = {static_cast<int32_t>(T)};
  BufferView params = Params(words);
  for (const PathConfig& c : ReductionConfigs()) {
    SCOPED_TRACE(c.Name());
    Guarded state = Output(s0.size() * 4, s0.data()), rec = Output(s0.size() * 4),
            out = Output(T * ldo * 4);
    // One recording: T from slot 0, state in place, the initial state recorded.
    auto cl = Record(
        c,
        [&](CommandList& l) {
          GdnArgs a;
          a.T = DynInt::Slot(0);
          a.max_T = T;
          a.n_k_heads = n_k;
          a.n_v_heads = n_v;
          a.dk = dk;
          a.dv = dv;
          a.q = qv;
          a.k = kv;
          a.v = vv;
          a.ldq = a.ldk = ldq;
          a.ldv = ldv;
          a.g = gv;
          a.beta = bv;
          a.ldg = ldg;
          a.state_in = a.state_out = state.view;
          a.state0_record = rec.view;
          a.out = out.view;
          a.ldo = ldo;
          GatedDeltaRule(l, a);
        },
        params);
    for (int32_t run_T : {static_cast<int32_t>(T), 2}) {  // a full pass, then a replay of 2
      words[0] = run_T;
      SetParams(params, words);
      WriteBuffer(dev(), state.view, s0.data(), s0.size() * 4);
      cl->Run();
      const std::vector<float> go = Read<float>(out), gs = Read<float>(state),
                               gr = Read<float>(rec);
      for (size_t i = 0; i < s0.size(); ++i) ASSERT_EQ(gr[i], s0[i]);
      StateBound twin(n_k, n_v, dk, dv, s0);
      std::vector<float> got;
      std::vector<double> want, tol, o, o_err;
      for (int64_t t = 0; t < run_T; ++t) {
        twin.Step(q.data() + t * ldq, k.data() + t * ldq, v.data() + t * ldv, g.data() + t * ldg,
                  beta.data() + t * ldg, o, o_err);
        for (int64_t i = 0; i < n_v * dv; ++i) {
          got.push_back(go[t * ldo + i]);
          want.push_back(o[i]);
          tol.push_back(o_err[i]);
        }
      }
      // The float twin (kernels::ref) agrees with the double one too (a check of the twin).
      std::vector<float> ref_state = s0, ref_out(T * ldo, 0.0f);
      kernels::GdnArgs r;
      r.T = run_T;
      r.n_k_heads = n_k;
      r.n_v_heads = n_v;
      r.dk = dk;
      r.dv = dv;
      r.q = q.data();
      r.k = k.data();
      r.v = v.data();
      r.ldq = r.ldk = ldq;
      r.ldv = ldv;
      r.g = g.data();
      r.beta = beta.data();
      r.ldg = ldg;
      r.state = ref_state.data();
      r.out = ref_out.data();
      r.ldo = ldo;
      kernels::ref::GatedDeltaRule(r);
      for (int64_t t = 0; t < run_T; ++t) {
        for (int64_t i = 0; i < n_v * dv; ++i) {
          ASSERT_NEAR(ref_out[t * ldo + i], want[t * n_v * dv + i], tol[t * n_v * dv + i]);
        }
      }
      testing::ExpectWithin(got, want, tol, "gdn out T=" + std::to_string(run_T));
      std::vector<double> ws(twin.S), we(twin.E);
      for (double& e : we) e += 1e-30;
      testing::ExpectWithin(gs, ws, we, "gdn state T=" + std::to_string(run_T));
    }
  }
}

// Attention twin (ref::Attention) plus the sigmoid gate, and the bound described above.
class VulkanAttention : public VkTest {
 protected:
  void Check(int64_t T, int64_t n_past, bool causal, int n_splits, const PathConfig& c) {
    const std::string what = fmt::format("T {} past {} {} splits {} {}", T, n_past,
                                         causal ? "causal" : "block", n_splits, c.Name());
    SCOPED_TRACE(what);
    const int n_head = 6, n_kv = 2;
    const int64_t D = 40, n_ctx = n_past + T + 3, row = n_kv * D + 2;
    const int64_t ldq = 2 * n_head * D + 1, ldo = n_head * D + 3;
    const int64_t kv_len_max = n_past + T;
    std::vector<float> q = testing::RandomFloats(rng_, T * ldq, -1.5f, 1.5f);
    std::vector<uint16_t> kc(n_ctx * row), vc(n_ctx * row);
    for (auto& h : kc) h = F32ToF16(std::uniform_real_distribution<float>(-1.5f, 1.5f)(rng_));
    for (auto& h : vc) h = F32ToF16(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng_));
    const BufferView qv = Upload(q), kv = Upload(kc), vv = Upload(vc);
    std::vector<int32_t> words = {static_cast<int32_t>(n_past)};
    BufferView params = Params(words);
    Guarded out = Output(T * ldo * 4);
    BufferView scratch =
        pool().Allocate(AttentionScratchFloats(T, n_head, n_splits, D) * 4, "scratch");
    Run(
        c,
        [&](CommandList& cl) {
          AttentionArgs a;
          a.q = qv;
          a.ldq = ldq;
          a.q_hs = 2 * D;  // q and gate interleaved per head, as attn_q
          a.k_cache = kv;
          a.v_cache = vv;
          a.kv_row = row;
          a.n_ctx = n_ctx;
          a.T = T;
          a.n_past = DynInt::Slot(0);
          a.n_head = n_head;
          a.n_head_kv = n_kv;
          a.head_dim = D;
          a.causal = causal;
          a.gate = qv.Sub(D * 4, qv.size - D * 4);
          a.ld_gate = ldq;
          a.gate_hs = 2 * D;
          a.out = out.view;
          a.ldo = ldo;
          a.out_hs = D;
          a.n_splits = n_splits;
          a.scratch = scratch;
          Attention(cl, a);
        },
        params);
    const std::vector<float> go = Read<float>(out);
    std::vector<float> ref_out(T * ldo, 0.0f);
    kernels::AttentionArgs r;
    r.q = q.data();
    r.ldq = ldq;
    r.q_head_stride = 2 * D;
    r.k = kc.data();
    r.v = vc.data();
    r.kv_type = GgmlType::kF16;
    r.ldk = r.ldv = row;
    r.out = ref_out.data();
    r.ldo = ldo;
    r.out_head_stride = D;
    r.T = T;
    r.n_past = n_past;
    r.n_head = n_head;
    r.n_head_kv = n_kv;
    r.head_dim = D;
    r.causal = causal;
    kernels::ref::Attention(r);
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    const int64_t tile = 64;
    std::vector<float> got;
    std::vector<double> want, tol;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t kv_len = causal ? n_past + t + 1 : n_past + T;
      for (int h = 0; h < n_head; ++h) {
        const int g = h / (n_head / n_kv);
        const float* qh = q.data() + t * ldq + h * 2 * D;
        // Scores' bounds and the softmax weights.
        std::vector<double> s(kv_len), p(kv_len);
        double max_err = 0.0, mx = -INFINITY, range = 0.0;
        for (int64_t pos = 0; pos < kv_len; ++pos) {
          double dot = 0.0, abs = 0.0;
          for (int64_t d = 0; d < D; ++d) {
            const double kd = F16ToF32(kc[pos * row + g * D + d]);
            dot += qh[d] * kd;
            abs += std::fabs(qh[d] * kd);
          }
          s[pos] = dot * scale;
          max_err = std::max(max_err, (Gamma(D + 2)) * abs * scale);
          mx = std::max(mx, s[pos]);
        }
        double sum = 0.0;
        for (int64_t pos = 0; pos < kv_len; ++pos) {
          p[pos] = std::exp(s[pos] - mx);
          sum += p[pos];
          range = std::max(range, mx - s[pos]);
        }
        const int64_t chunk = (kv_len + n_splits - 1) / n_splits;
        const double rel = 2 * max_err + (8 + 2 * range) * kUnit +
                           Gamma(chunk + 2 * (chunk / tile + 1) + 2 * 6 + n_splits + 8);
        for (int64_t d = 0; d < D; ++d) {
          double pv = 0.0;
          for (int64_t pos = 0; pos < kv_len; ++pos) {
            pv += p[pos] / sum * std::fabs(F16ToF32(vc[pos * row + g * D + d]));
          }
          const float gate = qh[D + d];
          const double sg = 1.0 / (1.0 + std::exp(-static_cast<double>(gate)));
          const double o = ref_out[t * ldo + h * D + d];
          got.push_back(go[t * ldo + h * D + d]);
          want.push_back(o * sg);
          tol.push_back(2 * rel * pv * sg + (8 + 2 * std::fabs(gate)) * kUnit * std::fabs(o * sg) +
                        1e-30);
        }
      }
    }
    testing::ExpectWithin(got, want, tol, "attention " + what);
    (void)kv_len_max;
  }
};

TEST_F(VulkanAttention, DecodeCausalAndBidirectionalBlocksWithSplits) {
  for (const PathConfig& c : ReductionConfigs()) {
    Check(1, 200, true, 1, c);  // decode, one split (several tiles)
    Check(1, 300, true, 4, c);  // decode, split over the keys
    Check(7, 33, true, 2, c);   // causal block
    Check(7, 33, false, 3, c);  // bidirectional block (denoise pass)
    Check(3, 0, false, 5, c);   // more splits than keys for some queries: empty splits
  }
}

}  // namespace
}  // namespace crossword::vulkan
