#version 450
// Read-bandwidth probe: every workgroup sums a strided share of the buffer (vec4 loads) and
// writes its total. Bindings: 1 src (vec4), 2 out (one float per workgroup).
#include "common.glsl"
#include "reduce.glsl"

layout(set = 0, binding = 1) readonly buffer SB { vec4 src[]; };
layout(set = 0, binding = 2) writeonly buffer OB { float outv[]; };

layout(push_constant) uniform PC {
  uint off_src, off_out;
  uint n_vec4;
} pc;

void main() {
  const uint threads = gl_NumWorkGroups.x * WG;
  vec4 s = vec4(0.0);
  for (uint i = gl_WorkGroupID.x * WG + gl_LocalInvocationID.x; i < pc.n_vec4; i += threads) {
    s += src[pc.off_src + i];
  }
  const float total = wg_sum(s.x + s.y + s.z + s.w);
  if (gl_LocalInvocationID.x == 0) outv[pc.off_out + gl_WorkGroupID.x] = total;
}
