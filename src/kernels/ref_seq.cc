// Scalar reference twins of the sequence kernels (attention, gated delta rule, causal conv1d)
// and the argument checks shared with the fast versions.
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "base/fp16.h"
#include "kernels/ref.h"

namespace crossword::kernels::ref {
namespace {

float LoadKv(const void* base, GgmlType type, int64_t index) {
  if (type == GgmlType::kF16) return F16ToF32(static_cast<const uint16_t*>(base)[index]);
  return static_cast<const float*>(base)[index];
}

}  // namespace

void CheckAttentionArgs(const AttentionArgs& a) {
  Check(a.q && a.k && a.v && a.out, "Attention: q, k, v and out must be non-null");
  Check(a.kv_type == GgmlType::kF16 || a.kv_type == GgmlType::kF32,
        "Attention: kv_type must be F16 or F32, got {}", TypeName(a.kv_type));
  Check(a.head_dim > 0 && a.head_dim <= 512, "Attention: head_dim {} must be in [1, 512]",
        a.head_dim);
  Check(a.n_head >= 1 && a.n_head_kv >= 1 && a.n_head % a.n_head_kv == 0,
        "Attention: n_head {} must be a positive multiple of n_head_kv {}", a.n_head, a.n_head_kv);
  Check(a.T >= 0 && a.n_past >= 0, "Attention: T {} and n_past {} must be >= 0", a.T, a.n_past);
  Check(a.ldk >= a.n_head_kv * a.head_dim && a.ldv >= a.n_head_kv * a.head_dim,
        "Attention: ldk {} / ldv {} must be >= n_head_kv * head_dim = {}", a.ldk, a.ldv,
        a.n_head_kv * a.head_dim);
  const int64_t qhs = a.q_head_stride ? a.q_head_stride : a.head_dim;
  const int64_t ohs = a.out_head_stride ? a.out_head_stride : a.head_dim;
  Check(qhs >= a.head_dim && ohs >= a.head_dim,
        "Attention: head strides (q {}, out {}) must be >= head_dim {}", qhs, ohs, a.head_dim);
  Check(a.T <= 1 || (a.ldq >= a.n_head * qhs && a.ldo >= a.n_head * ohs),
        "Attention: ldq {} / ldo {} must cover n_head heads", a.ldq, a.ldo);
}

void CheckGdnArgs(const GdnArgs& a) {
  Check(a.q && a.k && a.v && a.g && a.beta && a.state && a.out,
        "GatedDeltaRule: q, k, v, g, beta, state and out must be non-null");
  Check(a.dk >= 1 && a.dk <= 256 && a.dv >= 1 && a.dv <= 256,
        "GatedDeltaRule: dk {} and dv {} must be in [1, 256]", a.dk, a.dv);
  Check(a.n_k_heads >= 1 && a.n_v_heads >= 1 && a.n_v_heads % a.n_k_heads == 0,
        "GatedDeltaRule: n_v_heads {} must be a positive multiple of n_k_heads {}", a.n_v_heads,
        a.n_k_heads);
  Check(a.T >= 0, "GatedDeltaRule: T {} must be >= 0", a.T);
  Check(a.T <= 1 ||
            (a.ldq >= a.n_k_heads * a.dk && a.ldk >= a.n_k_heads * a.dk &&
             a.ldv >= a.n_v_heads * a.dv && a.ldg >= a.n_v_heads && a.ldo >= a.n_v_heads * a.dv),
        "GatedDeltaRule: row strides (ldq {}, ldk {}, ldv {}, ldg {}, ldo {}) must cover all heads",
        a.ldq, a.ldk, a.ldv, a.ldg, a.ldo);
  Check(a.n_snapshots >= 0 && (a.n_snapshots == 0 || a.snapshots != nullptr),
        "GatedDeltaRule: n_snapshots {} needs a non-null snapshots buffer", a.n_snapshots);
}

void CheckConv1dArgs(const Conv1dArgs& a) {
  Check(a.x && a.w && a.state && a.y, "CausalConv1dSilu: x, w, state and y must be non-null");
  Check(a.K >= 1 && a.K <= 16, "CausalConv1dSilu: kernel size K {} must be in [1, 16]", a.K);
  Check(a.C >= 1 && a.T >= 0, "CausalConv1dSilu: C {} must be >= 1 and T {} >= 0", a.C, a.T);
  Check(a.T <= 1 || (a.ldx >= a.C && a.ldy >= a.C),
        "CausalConv1dSilu: ldx {} and ldy {} must be >= C {}", a.ldx, a.ldy, a.C);
}

void Attention(const AttentionArgs& a) {
  CheckAttentionArgs(a);
  const int64_t D = a.head_dim;
  const int64_t qhs = a.q_head_stride ? a.q_head_stride : D;
  const int64_t ohs = a.out_head_stride ? a.out_head_stride : D;
  const float scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(D));
  const int group = a.n_head / a.n_head_kv;
  std::vector<double> scores, acc(D);
  for (int64_t t = 0; t < a.T; ++t) {
    const int64_t kv_len = a.causal ? a.n_past + t + 1 : a.n_past + a.T;
    scores.assign(kv_len, 0.0);
    for (int h = 0; h < a.n_head; ++h) {
      const float* q = a.q + t * a.ldq + h * qhs;
      const int64_t g = h / group;
      double max = -INFINITY;
      for (int64_t p = 0; p < kv_len; ++p) {
        double s = 0.0;
        for (int64_t d = 0; d < D; ++d) s += q[d] * LoadKv(a.k, a.kv_type, p * a.ldk + g * D + d);
        scores[p] = s * scale;
        max = std::max(max, scores[p]);
      }
      double sum = 0.0;
      for (int64_t p = 0; p < kv_len; ++p) {
        scores[p] = std::exp(scores[p] - max);
        sum += scores[p];
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t p = 0; p < kv_len; ++p) {
        for (int64_t d = 0; d < D; ++d) {
          acc[d] += scores[p] * LoadKv(a.v, a.kv_type, p * a.ldv + g * D + d);
        }
      }
      float* o = a.out + t * a.ldo + h * ohs;
      for (int64_t d = 0; d < D; ++d) o[d] = static_cast<float>(acc[d] / sum);
    }
  }
}

void GatedDeltaRule(const GdnArgs& a) {
  CheckGdnArgs(a);
  const int64_t dk = a.dk, dv = a.dv;
  const float scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(dk));
  std::vector<double> kv(dv);
  for (int hv = 0; hv < a.n_v_heads; ++hv) {
    const int hk = hv % a.n_k_heads;
    float* S = a.state + static_cast<int64_t>(hv) * dv * dk;
    for (int64_t t = 0; t < a.T; ++t) {
      const float* q = a.q + t * a.ldq + hk * dk;
      const float* k = a.k + t * a.ldk + hk * dk;
      const float* v = a.v + t * a.ldv + hv * dv;
      const float decay = std::exp(a.g[t * a.ldg + hv]);
      const float beta = a.beta[t * a.ldg + hv];
      float* o = a.out + t * a.ldo + hv * dv;
      for (int64_t j = 0; j < dv; ++j) {
        float* row = S + j * dk;
        double kvj = 0.0;
        for (int64_t i = 0; i < dk; ++i) {
          row[i] *= decay;
          kvj += static_cast<double>(row[i]) * k[i];
        }
        const float d = (v[j] - static_cast<float>(kvj)) * beta;
        double oj = 0.0;
        for (int64_t i = 0; i < dk; ++i) {
          row[i] += k[i] * d;
          oj += static_cast<double>(row[i]) * q[i];
        }
        o[j] = static_cast<float>(oj) * scale;
      }
      const int64_t slot = a.T - 1 - t;
      if (slot < a.n_snapshots) {
        std::copy(S, S + dv * dk, a.snapshots + (slot * a.n_v_heads + hv) * dv * dk);
      }
    }
  }
}

void CausalConv1dSilu(const Conv1dArgs& a) {
  CheckConv1dArgs(a);
  const int K = a.K;
  const int64_t C = a.C, T = a.T;
  // X row r (r < K-1: state, else x row r-(K-1)).
  auto X = [&](int64_t r, int64_t c) {
    return r < K - 1 ? a.state[r * C + c] : a.x[(r - (K - 1)) * a.ldx + c];
  };
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      float s = 0.0f;
      for (int j = 0; j < K; ++j) s += X(t + j, c) * a.w[c * K + j];
      a.y[t * a.ldy + c] = s / (1.0f + std::exp(-s));
    }
  }
  if (a.update_state && K > 1) {
    std::vector<float> keep((K - 1) * C);
    for (int64_t r = 0; r < K - 1; ++r) {
      for (int64_t c = 0; c < C; ++c) keep[r * C + c] = X(T + r, c);
    }
    std::copy(keep.begin(), keep.end(), a.state);
  }
}

}  // namespace crossword::kernels::ref
