#version 450
// Combines the splits of attention.comp for (head, query t) and applies the output gate:
// M = max m_s, L = sum l_s e^(m_s - M), out[d] = sum acc_s[d] e^(m_s - M) / L,
// then out *= sigmoid(gate) when has_gate. One invocation per head dim; no reduction.
// Bindings: 1 scratch, 2 gate, 3 out.
#include "common.glsl"

layout(set = 0, binding = 1) readonly buffer SB { float scratch[]; };
layout(set = 0, binding = 2) readonly buffer GB { float gate[]; };
layout(set = 0, binding = 3) writeonly buffer OB { float outv[]; };

layout(push_constant) uniform PC {
  uint off_s, off_g, off_o;
  uint n_head, n_splits, D;
  uint ld_gate, gate_hs, ldo, out_hs, has_gate;
} pc;

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
  const uint base = pc.off_s + (t * pc.n_head + h) * pc.n_splits * (pc.D + 2);
  float M = -1.0 / 0.0;
  for (uint s = 0; s < pc.n_splits; ++s) M = max(M, scratch[base + s * (pc.D + 2)]);
  float L = 0.0;
  for (uint s = 0; s < pc.n_splits; ++s) {
    const float ms = scratch[base + s * (pc.D + 2)];
    if (ms > -1.0 / 0.0) L += scratch[base + s * (pc.D + 2) + 1] * exp(ms - M);
  }
  for (uint d = gl_LocalInvocationID.x; d < pc.D; d += WG) {
    float o = 0.0;
    for (uint s = 0; s < pc.n_splits; ++s) {
      const float ms = scratch[base + s * (pc.D + 2)];
      if (ms > -1.0 / 0.0) o += scratch[base + s * (pc.D + 2) + 2 + d] * exp(ms - M);
    }
    o /= L;
    if (pc.has_gate != 0) o *= sigmoid_f(gate[pc.off_g + t * pc.ld_gate + h * pc.gate_hs + d]);
    outv[pc.off_o + t * pc.ldo + h * pc.out_hs + d] = o;
  }
}
