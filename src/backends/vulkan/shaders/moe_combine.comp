#version 450
// MoE output, one workgroup per token: y (+)= sum_j w[t*k+j] * down[t*k+j] (selection order)
// + sigmoid(shared_gate_w . f_t) * shared_t (when has_shared).
// Bindings: 1 down, 2 weights, 3 shared out, 4 shared gate weight, 5 f, 6 y (all f32).
#include "common.glsl"
#include "reduce.glsl"

layout(set = 0, binding = 1) readonly buffer DB { float down[]; };
layout(set = 0, binding = 2) readonly buffer WB { float wts[]; };
layout(set = 0, binding = 3) readonly buffer SB { float sh[]; };
layout(set = 0, binding = 4) readonly buffer GB { float gw[]; };
layout(set = 0, binding = 5) readonly buffer FB { float f[]; };
layout(set = 0, binding = 6) buffer YB { float y[]; };

layout(push_constant) uniform PC {
  uint off_d, off_w, off_s, off_gw, off_f, off_y;
  uint ld_down, k, ld_sh, ldf, ldy, n_embd;
  uint has_shared, accumulate;
} pc;

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint t = gl_WorkGroupID.x;
  float sg = 0.0;
  if (pc.has_shared != 0) {
    float dot = 0.0;
    for (uint i = tid; i < pc.n_embd; i += WG) dot += gw[pc.off_gw + i] * f[pc.off_f + t * pc.ldf + i];
    sg = sigmoid_f(wg_sum(dot));
  }
  for (uint i = tid; i < pc.n_embd; i += WG) {
    float acc = 0.0;
    for (uint j = 0; j < pc.k; ++j) {
      acc += wts[pc.off_w + t * pc.k + j] * down[pc.off_d + (t * pc.k + j) * pc.ld_down + i];
    }
    if (pc.has_shared != 0) acc += sg * sh[pc.off_s + t * pc.ld_sh + i];
    const uint yi = pc.off_y + t * pc.ldy + i;
    y[yi] = pc.accumulate != 0 ? y[yi] + acc : acc;
  }
}
