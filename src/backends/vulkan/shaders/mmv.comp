#version 450
// y[col][row] (+)= sum_k W[row][k] * x[col][k]: mat-vec / small mat-mat over one piece of a
// weight matrix (rows row0 .. row0 + n_out of the full matrix live in this piece), NCOLS
// activation rows per workgroup, ROWS weight rows per workgroup. Threads stride over the
// 32-element chunks of a row; the ROWS x NCOLS partial sums are reduced across the workgroup
// (subgroup or shared-memory path). Bindings: 1 weights, 2 x (f32 rows, or xq words on the
// int8 path), 3 y (f32).
#include "common.glsl"
#include "wtypes.glsl"

layout(constant_id = 2) const uint ROWS = 2;
layout(constant_id = 3) const uint NCOLS = 1;

#if !INT8
layout(set = 0, binding = 2) readonly buffer XB { float xf[]; };
#endif
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

shared float partial[ROWS * NCOLS * WG];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint group = gl_WorkGroupID.x + gl_WorkGroupID.z * pc.groups_x;
  const uint row0 = group * ROWS;
  if (row0 >= pc.n_out) return;  // uniform per workgroup
  const uint col0 = gl_WorkGroupID.y * NCOLS;
  const uint n_chunks = pc.n_in / 32;

  float acc[ROWS][NCOLS];
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    [[unroll]] for (uint c = 0; c < NCOLS; ++c) acc[r][c] = 0.0;
  }
  for (uint ch = tid; ch < n_chunks; ch += WG) {
    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
      if (row0 + r >= pc.n_out) break;
      const uint wbase = pc.off_w + (row0 + r) * pc.w_stride;
#if INT8
      [[dont_unroll]] for (uint hf = 0; hf < 2; ++hf) {
        [[unroll]] for (uint c = 0; c < NCOLS; ++c) {
          if (col0 + c >= pc.n_cols) break;
          acc[r][c] += dot_i8_half(wbase, ch, hf, pc.off_x + (col0 + c) * pc.ldx, pc.n_in);
        }
      }
#else
      [[dont_unroll]] for (uint p = 0; p < 4; ++p) {
        float w[8];
        w_part(wbase, ch, p, w);
        [[unroll]] for (uint c = 0; c < NCOLS; ++c) {
          if (col0 + c >= pc.n_cols) break;
          const uint xb = pc.off_x + (col0 + c) * pc.ldx + 32 * ch + 8 * p;
          float s = 0.0;
          [[unroll]] for (uint i = 0; i < 8; ++i) s += w[i] * act(xf[xb + i]);
          acc[r][c] += s;
        }
      }
#endif
    }
  }

  // Reduce the ROWS x NCOLS sums over the workgroup; thread k < NS writes sum k.
  const uint NS = ROWS * NCOLS;
  float total = 0.0;
#if USE_SUBGROUP
  const uint nsg = gl_NumSubgroups;
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    [[unroll]] for (uint c = 0; c < NCOLS; ++c) {
      const float s = subgroupAdd(acc[r][c]);
      if (gl_SubgroupInvocationID == 0) partial[(r * NCOLS + c) * nsg + gl_SubgroupID] = s;
    }
  }
  barrier();
  if (tid < NS) {
    for (uint i = 0; i < nsg; ++i) total += partial[tid * nsg + i];
  }
#else
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    [[unroll]] for (uint c = 0; c < NCOLS; ++c) partial[(r * NCOLS + c) * WG + tid] = acc[r][c];
  }
  barrier();
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) {
      for (uint k = 0; k < NS; ++k) partial[k * WG + tid] += partial[k * WG + tid + s];
    }
    barrier();
  }
  if (tid < NS) total = partial[tid * WG];
#endif
  if (tid < NS) {
    const uint r = tid / NCOLS, c = tid % NCOLS;
    if (row0 + r < pc.n_out && col0 + c < pc.n_cols) {
      const uint yi = pc.off_y + (col0 + c) * pc.ldy + row0 + r;
      y[yi] = pc.accumulate != 0 ? y[yi] + total : total;
    }
  }
}
