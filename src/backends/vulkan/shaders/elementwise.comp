#version 450
// y[i] = a[i] + b[i]. Bindings: 1 a, 2 b, 3 y (f32). No reduction.
#include "common.glsl"

layout(set = 0, binding = 1) readonly buffer AB { float a[]; };
layout(set = 0, binding = 2) readonly buffer BB { float b[]; };
layout(set = 0, binding = 3) writeonly buffer YB { float y[]; };

layout(push_constant) uniform PC {
  uint off_a, off_b, off_y;
  uint n;
  uint groups_x;
} pc;

void main() {
  const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.z * pc.groups_x) * WG + gl_LocalInvocationID.x;
  if (i < pc.n) y[pc.off_y + i] = a[pc.off_a + i] + b[pc.off_b + i];
}
