#version 450
// KV cache write: rows t of k and v (f32) to rows pos0 + t of the f16 caches, rounded to
// nearest even (as base/fp16.h F32ToF16). Rows at or past n_ctx are dropped. Elementwise.
// Bindings: 1 k, 2 v, 3 k cache (f16 bits), 4 v cache.
#include "common.glsl"

layout(set = 0, binding = 1) readonly buffer KB { float k[]; };
layout(set = 0, binding = 2) readonly buffer VB { float v[]; };
layout(set = 0, binding = 3) writeonly buffer KC { uint16_t kc[]; };
layout(set = 0, binding = 4) writeonly buffer VC { uint16_t vc[]; };

layout(push_constant) uniform PC {
  uint off_k, off_v, off_kc, off_vc;
  uint ldk, ldv, row_elems, n_tokens, n_ctx;
  int pos_val, pos_slot;
} pc;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= pc.n_tokens * pc.row_elems) return;
  const uint t = i / pc.row_elems, e = i % pc.row_elems;
  const int pos = dyn(pc.pos_val, pc.pos_slot) + int(t);
  if (pos < 0 || uint(pos) >= pc.n_ctx) return;
  const uint dst = uint(pos) * pc.row_elems + e;
  kc[pc.off_kc + dst] = uint16_t(f32_to_f16(k[pc.off_k + t * pc.ldk + e]));
  vc[pc.off_vc + dst] = uint16_t(f32_to_f16(v[pc.off_v + t * pc.ldv + e]));
}
