// The mat-vec core shared by mmv.comp, moe_gate_up.comp and moe_down.comp: NW weight rows
// times NCOLS activation rows per workgroup. The includer defines the spec constants NW and
// NCOLS, fills core_wbase[] (unit index of each weight row, wtypes.glsl) and core_xbase[]
// (float index of each f32 activation row, or word index of each xq row on the int8 path),
// calls core_dot(), then core_reduce(), which returns sum tid (tid < NW * NCOLS, row-major
// [weight row][activation row]) to invocation tid. Threads stride over the 32-element chunks;
// chunks are decoded in 8-element parts (float path) or 16-element halves (int8 path) in
// loops that are not unrolled, which keeps lavapipe's LLVM compile time small.
#if !INT8
layout(set = 0, binding = 2) readonly buffer XB { float xf[]; };
#endif

const uint NSUM = NW * NCOLS;
shared float partial[NSUM * WG];
uint core_wbase[NW];
uint core_xbase[NCOLS];
float core_acc[NW][NCOLS];

// Accumulates the first nw weight rows times the first nc activation rows (n_in elements).
void core_dot(uint nw, uint nc, uint n_in) {
  const uint tid = gl_LocalInvocationID.x;
  [[unroll]] for (uint r = 0; r < NW; ++r) {
    [[unroll]] for (uint c = 0; c < NCOLS; ++c) core_acc[r][c] = 0.0;
  }
  for (uint ch = tid; ch < n_in / 32; ch += WG) {
    [[unroll]] for (uint r = 0; r < NW; ++r) {
      if (r >= nw) break;
#if INT8
      [[dont_unroll]] for (uint hf = 0; hf < 2; ++hf) {
        [[unroll]] for (uint c = 0; c < NCOLS; ++c) {
          if (c >= nc) break;
          core_acc[r][c] += dot_i8_half(core_wbase[r], ch, hf, core_xbase[c], n_in);
        }
      }
#else
      [[dont_unroll]] for (uint p = 0; p < 4; ++p) {
        float w[8];
        w_part(core_wbase[r], ch, p, w);
        [[unroll]] for (uint c = 0; c < NCOLS; ++c) {
          if (c >= nc) break;
          const uint xb = core_xbase[c] + 32 * ch + 8 * p;
          float s = 0.0;
          [[unroll]] for (uint i = 0; i < 8; ++i) s += w[i] * act(xf[xb + i]);
          core_acc[r][c] += s;
        }
      }
#endif
    }
  }
}

// Workgroup reduction of core_acc (uniform control flow). Returns sum tid for tid < NSUM.
float core_reduce() {
  const uint tid = gl_LocalInvocationID.x;
  float total = 0.0;
#if USE_SUBGROUP
  const uint nsg = gl_NumSubgroups;
  [[unroll]] for (uint r = 0; r < NW; ++r) {
    [[unroll]] for (uint c = 0; c < NCOLS; ++c) {
      const float s = subgroupAdd(core_acc[r][c]);
      if (gl_SubgroupInvocationID == 0) partial[(r * NCOLS + c) * nsg + gl_SubgroupID] = s;
    }
  }
  barrier();
  if (tid < NSUM) {
    for (uint i = 0; i < nsg; ++i) total += partial[tid * nsg + i];
  }
#else
  [[unroll]] for (uint r = 0; r < NW; ++r) {
    [[unroll]] for (uint c = 0; c < NCOLS; ++c) partial[(r * NCOLS + c) * WG + tid] = core_acc[r][c];
  }
  barrier();
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) {
      for (uint k = 0; k < NSUM; ++k) partial[k * WG + tid] += partial[k * WG + tid + s];
    }
    barrier();
  }
  if (tid < NSUM) total = partial[tid * WG];
#endif
  barrier();  // partial is reused by the next call
  return total;
}
