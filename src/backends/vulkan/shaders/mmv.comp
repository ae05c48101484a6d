#version 450
// y[col][row] (+)= sum_k W[row][k] * x[col][k]: mat-vec / small mat-mat over one piece of a
// weight matrix (its rows are rows 0 .. n_out of this dispatch), ROWS weight rows and NCOLS
// activation rows per workgroup (mmv_core.glsl). Bindings: 1 weights, 2 x (f32 rows, or xq
// words on the int8 path), 3 y (f32).
#include "common.glsl"
#include "wtypes.glsl"

layout(constant_id = 2) const uint ROWS = 2;
layout(constant_id = 3) const uint NCOLS = 1;
#define NW ROWS
#include "mmv_core.glsl"

layout(set = 0, binding = 3) buffer YB { float y[]; };

layout(push_constant) uniform PC {
  uint off_w, off_x, off_y;
  uint n_in;        // elements per row
  uint n_out;       // rows of this piece
  uint n_cols;      // activation rows
  uint w_stride;    // units between weight rows
  uint ldx;         // floats (float path) or words (int8 path) between activation rows
  uint ldy;         // floats between output rows
  uint accumulate;  // 1: y += result
  uint groups_x;    // workgroups along x (row groups = x + z * groups_x)
} pc;

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint row0 = (gl_WorkGroupID.x + gl_WorkGroupID.z * pc.groups_x) * ROWS;
  if (row0 >= pc.n_out) return;  // uniform per workgroup
  const uint col0 = gl_WorkGroupID.y * NCOLS;
  const uint nw = min(ROWS, pc.n_out - row0), nc = min(NCOLS, pc.n_cols - col0);
  [[unroll]] for (uint r = 0; r < ROWS; ++r) core_wbase[r] = pc.off_w + (row0 + r) * pc.w_stride;
  [[unroll]] for (uint c = 0; c < NCOLS; ++c) core_xbase[c] = pc.off_x + (col0 + c) * pc.ldx;
  core_dot(nw, nc, pc.n_in);
  const float total = core_reduce();
  if (tid < NSUM) {
    const uint r = tid / NCOLS, c = tid % NCOLS;
    if (r < nw && c < nc) {
      const uint yi = pc.off_y + (col0 + c) * pc.ldy + row0 + r;
      y[yi] = pc.accumulate != 0 ? y[yi] + total : total;
    }
  }
}
