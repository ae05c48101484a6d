#version 450
// Grouped MoE gate/up + SwiGLU: h[row][i] = silu(gate_e . x_t) * (up_e . x_t) for every
// (token t, slot j) pair routed to expert e, row = t*k + j. Workgroup (x, y) computes ROWS
// outputs i of the used expert in slot y of the grouping buffer (moe_group.comp) for all its
// tokens, NCOLS tokens at a time, so each used expert's rows are read once per pass. The weight
// stack holds per expert n_ff gate rows then n_ff up rows (2 ROWS weight rows per workgroup).
// dense = 1: expert 0 on every token, h row t (the shared expert).
// Bindings: 1 gate/up stack piece (experts e_first .. e_first + e_count), 2 x or xq, 3 group
// (int32), 4 h (f32).
#include "common.glsl"
#include "wtypes.glsl"

layout(constant_id = 2) const uint ROWS = 2;
layout(constant_id = 3) const uint NCOLS = 1;
const uint NW = 2 * ROWS;
#include "mmv_core.glsl"

layout(set = 0, binding = 3) readonly buffer GB { int grp[]; };
layout(set = 0, binding = 4) writeonly buffer HB { float h[]; };

layout(push_constant) uniform PC {
  uint off_w, off_x, off_g, off_h;
  uint n_in, n_ff;
  uint w_stride, e_stride;  // units between rows / experts
  uint e_first, e_count;
  uint ldx, ldh;
  uint dense, n_tokens;
  uint act_off, pair_token, pair_row;  // grouping buffer layout (words)
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
  if (e < pc.e_first || e >= pc.e_first + pc.e_count) return;  // another piece's expert
  const uint ebase = pc.off_w + (e - pc.e_first) * pc.e_stride;
  const uint nr = min(ROWS, pc.n_ff - row0);
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    core_wbase[r] = ebase + (row0 + r) * pc.w_stride;                  // gate row
    core_wbase[ROWS + r] = ebase + (pc.n_ff + row0 + r) * pc.w_stride;  // up row
  }
  for (uint c0 = 0; c0 < count; c0 += NCOLS) {
    const uint nc = min(NCOLS, count - c0);
    [[unroll]] for (uint c = 0; c < NCOLS; ++c) {
      const uint p = first + min(c0 + c, count - 1);
      const uint t = pc.dense != 0 ? p : uint(grp[pc.off_g + pc.pair_token + p]);
      core_xbase[c] = pc.off_x + t * pc.ldx;
    }
    core_dot(NW, nc, pc.n_in);
    const float total = core_reduce();
    // Sums [r][c] for gate rows r < ROWS and up rows ROWS + r: pair them through shared memory.
    if (tid < NSUM) partial[tid] = total;
    barrier();
    if (tid < ROWS * NCOLS) {
      const uint r = tid / NCOLS, c = tid % NCOLS;
      if (r < nr && c < nc) {
        const uint p = first + c0 + c;
        const uint row = pc.dense != 0 ? p : uint(grp[pc.off_g + pc.pair_row + p]);
        const float g = partial[r * NCOLS + c], u = partial[(ROWS + r) * NCOLS + c];
        h[pc.off_h + row * pc.ldh + row0 + r] = silu_f(g) * u;
      }
    }
    barrier();
  }
}
