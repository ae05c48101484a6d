#version 450
// Grouped MoE down projection: out[row][:] = down_e . h[row] for every pair (row = t*k + j)
// routed to expert e; workgroup (x, y) computes ROWS output features of the used expert in slot
// y for all its pairs, NCOLS at a time (each used expert read once per pass). dense = 1: expert
// 0 on rows t < n_tokens (the shared expert).
// Bindings: 1 down stack piece, 2 h or hq, 3 group (int32), 4 out (f32).
#include "common.glsl"
#include "wtypes.glsl"

layout(constant_id = 2) const uint ROWS = 2;
layout(constant_id = 3) const uint NCOLS = 1;
#define NW ROWS
#include "mmv_core.glsl"

layout(set = 0, binding = 3) readonly buffer GB { int grp[]; };
layout(set = 0, binding = 4) writeonly buffer OB { float outv[]; };

layout(push_constant) uniform PC {
  uint off_w, off_x, off_g, off_o;
  uint n_in, n_out;
  uint w_stride, e_stride;
  uint e_first, e_count;
  uint ldx, ldo;
  uint dense, n_tokens;
  uint act_off, pair_row;
} pc;

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint row0 = gl_WorkGroupID.x * ROWS;
  const uint slot = gl_WorkGroupID.y;
  uint e = 0, first = 0, count = pc.n_tokens;
  if (pc.dense == 0) {
    if (slot >= uint(grp[pc.off_g])) return;
    e = uint(grp[pc.off_g + pc.act_off + 3 * slot]);
    first = uint(grp[pc.off_g + pc.act_off + 3 * slot + 1]);
    count = uint(grp[pc.off_g + pc.act_off + 3 * slot + 2]);
  }
  if (e < pc.e_first || e >= pc.e_first + pc.e_count) return;
  const uint ebase = pc.off_w + (e - pc.e_first) * pc.e_stride;
  const uint nr = min(ROWS, pc.n_out - row0);
  [[unroll]] for (uint r = 0; r < ROWS; ++r) core_wbase[r] = ebase + (row0 + r) * pc.w_stride;
  for (uint c0 = 0; c0 < count; c0 += NCOLS) {
    const uint nc = min(NCOLS, count - c0);
    uint rows[NCOLS];
    [[unroll]] for (uint c = 0; c < NCOLS; ++c) {
      const uint p = first + min(c0 + c, count - 1);
      rows[c] = pc.dense != 0 ? p : uint(grp[pc.off_g + pc.pair_row + p]);
      core_xbase[c] = pc.off_x + rows[c] * pc.ldx;
    }
    core_dot(nr, nc, pc.n_in);
    const float total = core_reduce();
    if (tid < NSUM) {
      const uint r = tid / NCOLS, c = tid % NCOLS;
      if (r < nr && c < nc) outv[pc.off_o + rows[c] * pc.ldo + row0 + r] = total;
    }
  }
}
