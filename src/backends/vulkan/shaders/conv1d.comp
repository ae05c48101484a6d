#version 450
// GDN causal depthwise conv1d + SiLU + L2 norm of the q/k heads (kernels/ref_seq.cc
// CausalConv1dSilu, model GdnLayer): X = concat(state_in [K-1][C], x [T][C]),
// y[t][c] = silu(sum_j X[t+j][c] w[c*K + j]); then for the first n_l2 heads of WG channels,
// y *= 1 / max(sqrt(sum y^2), eps) per token. state_out <- last K-1 rows of X (may alias
// state_in: every invocation reads its channel before writing it). One workgroup per head of
// WG channels, one invocation per channel, tokens in order, the window in registers.
// Bindings: 1 x, 2 w, 3 state_in, 4 state_out, 5 y, 6 state0 record (optional).
#include "common.glsl"
#include "reduce.glsl"

layout(set = 0, binding = 1) readonly buffer XB { float x[]; };
layout(set = 0, binding = 2) readonly buffer WB { float w[]; };
layout(set = 0, binding = 3) readonly buffer SIB { float sin_[]; };
layout(set = 0, binding = 4) writeonly buffer SOB { float sout[]; };
layout(set = 0, binding = 5) writeonly buffer YB { float y[]; };
layout(set = 0, binding = 6) writeonly buffer RB { float rec[]; };

layout(push_constant) uniform PC {
  uint off_x, off_w, off_si, off_so, off_y, off_r;
  uint ldx, ldy, T, C, n_l2, record;
  float eps;
} pc;

layout(constant_id = 2) const uint KS = 4;  // the kernel size K

void main() {
  const uint head = gl_WorkGroupID.x;
  const uint c = head * WG + gl_LocalInvocationID.x;
  const uint K1 = KS - 1;
  float win[KS];
  float wc[KS];
  [[unroll]] for (uint j = 0; j < KS; ++j) wc[j] = w[pc.off_w + c * KS + j];
  [[unroll]] for (uint r = 0; r < K1; ++r) {
    win[r] = sin_[pc.off_si + r * pc.C + c];
    if (pc.record != 0) rec[pc.off_r + r * pc.C + c] = win[r];
  }
  const bool l2 = head < pc.n_l2;
  for (uint t = 0; t < pc.T; ++t) {
    const float xv = x[pc.off_x + t * pc.ldx + c];
    float s = 0.0;
    [[unroll]] for (uint j = 0; j < K1; ++j) s += win[j] * wc[j];
    s += xv * wc[K1];
    float v = silu_f(s);
    if (l2) {  // uniform per workgroup
      const float ss = wg_sum(v * v);
      v *= 1.0 / max(sqrt(ss), pc.eps);
    }
    y[pc.off_y + t * pc.ldy + c] = v;
    [[unroll]] for (uint j = 0; j + 1 < K1; ++j) win[j] = win[j + 1];
    if (K1 > 0) win[K1 - 1] = xv;
  }
  [[unroll]] for (uint r = 0; r < K1; ++r) sout[pc.off_so + r * pc.C + c] = win[r];
}
