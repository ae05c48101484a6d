#version 450
// Top-k, stage 1: workgroup (chunk, row) takes EPT * WG logits of a row (EPT per invocation,
// in registers), writes the chunk's max M_c, sum_c exp((l - M_c) * inv_temp) and its k largest
// (value, id) pairs in descending order (ties: lower id; NaN counts as -inf) to scratch:
// [M_c, S_c, v_0, id_0, v_1, id_1, ...] (ids as float bits). k rounds of a workgroup argmax.
// Bindings: 1 logits, 2 scratch.
#include "common.glsl"
#include "reduce.glsl"

layout(constant_id = 2) const uint EPT = 16;

layout(set = 0, binding = 1) readonly buffer LB { float logits[]; };
layout(set = 0, binding = 2) buffer SB { float scratch[]; };

layout(push_constant) uniform PC {
  uint off_l, off_s;
  uint ld, n_vocab, k, n_chunks;
  float inv_temp;
} pc;

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint chunk = gl_WorkGroupID.x, row = gl_WorkGroupID.y;
  const uint base = chunk * EPT * WG;
  float v[EPT];
  float lmax = -1.0 / 0.0;
  [[unroll]] for (uint m = 0; m < EPT; ++m) {
    const uint idx = base + tid + WG * m;
    float x = idx < pc.n_vocab ? logits[pc.off_l + row * pc.ld + idx] : -1.0 / 0.0;
    if (isnan(x)) x = -1.0 / 0.0;
    v[m] = x;
    lmax = max(lmax, x);
  }
  const float M = wg_max(lmax);
  float s = 0.0;
  [[unroll]] for (uint m = 0; m < EPT; ++m) s += v[m] > -1.0 / 0.0 ? exp((v[m] - M) * pc.inv_temp) : 0.0;
  const float S = wg_sum(s);
  const uint out0 = pc.off_s + (row * pc.n_chunks + chunk) * (2 + 2 * pc.k);
  if (tid == 0) {
    scratch[out0] = M;
    scratch[out0 + 1] = S;
  }
  uint taken = 0;  // bit m: v[m] already selected
  for (uint j = 0; j < pc.k; ++j) {
    float best = -1.0 / 0.0;
    uint best_i = 0xffffffffu;
    [[unroll]] for (uint m = 0; m < EPT; ++m) {
      const uint idx = base + tid + WG * m;
      if ((taken & (1u << m)) == 0 && idx < pc.n_vocab && (v[m] > best || best_i == 0xffffffffu)) {
        best = v[m];
        best_i = idx;
      }
    }
    const uint w = wg_argmax(best, best_i);
    if (w != 0xffffffffu && (w - base) % WG == tid) {
      const uint m = (w - base) / WG;
      taken |= 1u << m;
      scratch[out0 + 2 + 2 * j] = best;
      scratch[out0 + 3 + 2 * j] = uintBitsToFloat(w);
    } else if (w == 0xffffffffu && tid == 0) {  // fewer than k entries in this chunk
      scratch[out0 + 2 + 2 * j] = -1.0 / 0.0;
      scratch[out0 + 3 + 2 * j] = uintBitsToFloat(0xffffffffu);
    }
  }
}
