#version 450
// Activation rows -> the int8 formats of the CPU engine (kernels/ref.cc QuantizeActRow):
//   format 0 (Q8_0, for Q4_0/Q8_0 weights): blocks of 32, d = fp16(amax/127),
//            q = nearest-even(x * (127/amax));
//   format 1 (Q8_K, for K-quants): blocks of 256, iscale = -127/max (max = the first element of
//            largest magnitude), q = min(127, nearest-even(iscale*x)), d = 1/iscale, sums of 16.
// Output row (uint words, wtypes.glsl): quants packed 4 per word, scales, [Q8_K: int32 sums].
// One workgroup per 256 elements of a row; thread i < 64 handles elements 4i .. 4i+3.
// Bindings: 1 x (f32), 2 xq (uint).
#include "common.glsl"
#include "reduce.glsl"

layout(set = 0, binding = 1) readonly buffer XB { float x[]; };
layout(set = 0, binding = 2) writeonly buffer QB { uint xq[]; };

layout(push_constant) uniform PC {
  uint off_x, off_q;
  uint n_in;
  uint ldx, ldq;
  uint format;
} pc;

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint row = gl_WorkGroupID.y;
  const uint e0 = gl_WorkGroupID.x * 256 + (tid % 64) * 4;
  const bool live = tid < 64 && e0 < pc.n_in;
  const uint xb = pc.off_x + row * pc.ldx;
  const uint qb = pc.off_q + row * pc.ldq;
  vec4 v = vec4(0.0);
  if (live) v = vec4(x[xb + e0], x[xb + e0 + 1], x[xb + e0 + 2], x[xb + e0 + 3]);
  const vec4 av = abs(v);
  const float amax_local = max(max(av.x, av.y), max(av.z, av.w));
  ivec4 q;
  if (pc.format == 0) {
    const float amax = seg_max(amax_local, 8);
    const float id = amax != 0.0 ? precise_div(127.0, amax) : 0.0;
    q = ivec4(roundEven(v * id));
    if (live && (tid % 8) == 0) {
      xq[qb + pc.n_in / 4 + e0 / 32] = floatBitsToUint(f16_to_f32(f32_to_f16(precise_div(amax, 127.0))));
    }
  } else {
    const float amax = seg_max(amax_local, 64);
    uint first = 0xffffffffu;
    for (int i = 3; i >= 0; --i) {
      if (live && av[i] == amax) first = e0 + uint(i);
    }
    first = seg_min_u(first, 64);
    if (amax == 0.0) {
      q = ivec4(0);
    } else {
      const float maxv = x[xb + first];
      const float iscale = precise_div(-127.0, maxv);
      q = min(ivec4(roundEven(iscale * v)), ivec4(127));
      if (live && (tid % 64) == 0) xq[qb + pc.n_in / 4 + e0 / 256] = floatBitsToUint(precise_div(1.0, iscale));
    }
    if (amax == 0.0 && live && (tid % 64) == 0) xq[qb + pc.n_in / 4 + e0 / 256] = 0u;
    const float s = seg_sum(float(q.x + q.y + q.z + q.w), 4);
    if (live && (tid % 4) == 0) xq[qb + pc.n_in / 4 + pc.n_in / 256 + e0 / 16] = uint(int(s));
  }
  if (live) {
    xq[qb + e0 / 4] = (uint(q.x) & 0xffu) | ((uint(q.y) & 0xffu) << 8) | ((uint(q.z) & 0xffu) << 16) |
                      (uint(q.w) << 24);
  }
}
