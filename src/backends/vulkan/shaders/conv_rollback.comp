#version 450
// Rebuilds the conv window after keeping n_keep tokens of a recorded pass (model state.cc
// RollbackTo): state_out[r][c] = row n_keep - (K-1) + r of concat(conv0 [K-1][C], x_rec).
// Elementwise, no reduction. Bindings: 1 conv0, 2 x_rec, 3 state_out.
#include "common.glsl"

layout(set = 0, binding = 1) readonly buffer CB { float conv0[]; };
layout(set = 0, binding = 2) readonly buffer XB { float xr[]; };
layout(set = 0, binding = 3) writeonly buffer SB { float sout[]; };

layout(push_constant) uniform PC {
  uint off_c, off_x, off_s;
  uint ldx, C, K;
  int keep_val, keep_slot;
} pc;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  const uint K1 = pc.K - 1;
  if (i >= K1 * pc.C) return;
  const uint r = i / pc.C, c = i % pc.C;
  const int src = dyn(pc.keep_val, pc.keep_slot) - int(K1) + int(r);
  sout[pc.off_s + i] = src >= 0 ? xr[pc.off_x + uint(src) * pc.ldx + c]
                                : conv0[pc.off_c + uint(int(K1) + src) * pc.C + c];
}
