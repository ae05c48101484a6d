#version 450
// Attention over an f16 KV cache, flash form (kernels::Attention): workgroup (split, head,
// query t) scans keys [split * chunk, min(kv_len, (split + 1) * chunk)) in tiles of WG keys:
// one invocation per key computes its score, the tile's max and sum go through a workgroup
// reduction (online softmax), and each invocation accumulates V for its DPT dims. It writes the
// split's running max m, sum l and unnormalized accumulator to scratch; attention_reduce.comp
// combines the splits. kv_len = causal ? n_past + t + 1 : n_past + T (bidirectional block);
// chunk = ceil(kv_len / n_splits) at run time (n_past may be a parameter slot).
// Bindings: 1 q, 2 k cache (f16 pairs as uint), 3 v cache (uint), 4 scratch.
#include "common.glsl"
#include "reduce.glsl"

layout(constant_id = 2) const uint DPT = 4;  // head dims per invocation: ceil(head_dim / WG)

layout(set = 0, binding = 1) readonly buffer QB { float q[]; };
layout(set = 0, binding = 2) readonly buffer KC { uint kc[]; };
layout(set = 0, binding = 3) readonly buffer VC { uint16_t vc[]; };
layout(set = 0, binding = 4) writeonly buffer SB { float scratch[]; };

layout(push_constant) uniform PC {
  uint off_q, off_k, off_v, off_s;
  uint ldq, q_hs, kv_row, n_ctx, T;
  int past_val, past_slot;
  uint n_head, group, D, causal, n_splits;
  float scale;
} pc;

shared float qs[256];
shared float ps[1024];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint split = gl_WorkGroupID.x, h = gl_WorkGroupID.y, t = gl_WorkGroupID.z;
  const uint kvh = h / pc.group;
  const uint n_past = uint(dyn(pc.past_val, pc.past_slot));
  const uint kv_len = min(pc.causal != 0 ? n_past + t + 1 : n_past + pc.T, pc.n_ctx);
  const uint chunk = (kv_len + pc.n_splits - 1) / pc.n_splits;
  const uint k0 = min(split * chunk, kv_len), k1 = min(k0 + chunk, kv_len);
  for (uint d = tid; d < pc.D; d += WG) qs[d] = q[pc.off_q + t * pc.ldq + h * pc.q_hs + d];
  barrier();
  float m = -1.0 / 0.0, l = 0.0;
  float acc[DPT];
  [[unroll]] for (uint i = 0; i < DPT; ++i) acc[i] = 0.0;
  for (uint kb = k0; kb < k1; kb += WG) {  // uniform: k0, k1 are per workgroup
    const uint key = kb + tid;
    float s = -1.0 / 0.0;
    if (key < k1) {
      const uint kbase = pc.off_k + (key * pc.kv_row + kvh * pc.D) / 2;  // kv_row, D even
      float dot = 0.0;
      for (uint d = 0; d < pc.D; d += 2) {
        const vec2 kv2 = unpackHalf2x16(kc[kbase + d / 2]);
        dot += qs[d] * kv2.x + qs[d + 1] * kv2.y;
      }
      s = dot * pc.scale;
    }
    const float m_new = max(m, wg_max(s));
    const float p = key < k1 ? exp(s - m_new) : 0.0;
    ps[tid] = p;
    const float tile_sum = wg_sum(p);  // its barriers also publish ps
    const float corr = exp(m - m_new);
    l = l * corr + tile_sum;
    const uint n = min(WG, k1 - kb);
    [[unroll]] for (uint i = 0; i < DPT; ++i) {
      const uint d = tid + WG * i;
      if (d < pc.D) {
        float a = acc[i] * corr;
        for (uint j = 0; j < n; ++j) {
          a += ps[j] * f16_to_f32(uint(vc[pc.off_v + (kb + j) * pc.kv_row + kvh * pc.D + d]));
        }
        acc[i] = a;
      }
    }
    m = m_new;
    barrier();  // ps is rewritten by the next tile
  }
  const uint base = pc.off_s + ((t * pc.n_head + h) * pc.n_splits + split) * (pc.D + 2);
  if (tid == 0) {
    scratch[base] = m;
    scratch[base + 1] = l;
  }
  [[unroll]] for (uint i = 0; i < DPT; ++i) {
    const uint d = tid + WG * i;
    if (d < pc.D) scratch[base + 2 + d] = acc[i];
  }
}
