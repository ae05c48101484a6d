#version 450
// RMSNorm over groups of n elements, one workgroup per (head, row) (kernels/ref.cc RmsNorm):
// y = x * (1 / sqrt(mean(x^2) + eps)) * w. mode 1 first adds the residual to x (written back),
// mode 2 multiplies by silu(gate) (the GDN gated norm). y may alias x.
// Bindings: 1 x, 2 w, 3 residual or gate, 4 y.
#include "common.glsl"
#include "reduce.glsl"

layout(set = 0, binding = 1) buffer XB { float x[]; };
layout(set = 0, binding = 2) readonly buffer WB { float w[]; };
layout(set = 0, binding = 3) readonly buffer RB { float r[]; };
layout(set = 0, binding = 4) buffer YB { float y[]; };

layout(push_constant) uniform PC {
  uint off_x, off_w, off_r, off_y;
  uint n, ldx, x_hs, ldr, r_hs, ldy, y_hs;
  uint mode, has_w;
  float eps;
} pc;

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint hd = gl_WorkGroupID.x, row = gl_WorkGroupID.y;
  const uint xb = pc.off_x + row * pc.ldx + hd * pc.x_hs;
  const uint rb = pc.off_r + row * pc.ldr + hd * pc.r_hs;
  const uint yb = pc.off_y + row * pc.ldy + hd * pc.y_hs;
  float ss = 0.0;
  for (uint i = tid; i < pc.n; i += WG) {
    float v = x[xb + i];
    if (pc.mode == 1) {
      v += r[rb + i];
      x[xb + i] = v;
    }
    ss += v * v;
  }
  const float scale = 1.0 / sqrt(wg_sum(ss) / float(pc.n) + pc.eps);
  for (uint i = tid; i < pc.n; i += WG) {
    float o = x[xb + i] * scale;
    if (pc.has_w != 0) o *= w[pc.off_w + i];
    if (pc.mode == 2) o *= silu_f(r[rb + i]);
    y[yb + i] = o;
  }
}
