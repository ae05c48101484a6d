#version 450
// Per head of each token, in place: RMSNorm with weight w (has_norm), then NeoX rope on the
// first n_rot dims at position pos0 + t (has_rope) from a cos/sin table built on the host with
// the CPU's float operations (ops.h RopeTable), so GPU results do not depend on the device's
// sin/cos precision at large angles. One workgroup per (head, token); the head is staged in
// shared memory (head_dim <= 512). Positions outside the table give NaN (a visible failure).
// Bindings: 1 x, 2 w, 3 rope table.
#include "common.glsl"
#include "reduce.glsl"

layout(set = 0, binding = 1) buffer XB { float x[]; };
layout(set = 0, binding = 2) readonly buffer WB { float w[]; };
layout(set = 0, binding = 3) readonly buffer TB { float rope[]; };

layout(push_constant) uniform PC {
  uint off_x, off_w, off_t;
  uint ldx, hs, D, n_rot, n_pos;
  int pos_val, pos_slot;
  uint has_norm, has_rope;
  float eps;
} pc;

shared float sv[512];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint hd = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
  const uint xb = pc.off_x + t * pc.ldx + hd * pc.hs;
  float ss = 0.0;
  for (uint i = tid; i < pc.D; i += WG) {
    sv[i] = x[xb + i];
    ss += sv[i] * sv[i];
  }
  if (pc.has_norm != 0) {
    const float scale = 1.0 / sqrt(wg_sum(ss) / float(pc.D) + pc.eps);
    for (uint i = tid; i < pc.D; i += WG) sv[i] = sv[i] * scale * w[pc.off_w + i];
  }
  barrier();
  const uint half_rot = pc.has_rope != 0 ? pc.n_rot / 2 : 0;
  const int pos = dyn(pc.pos_val, pc.pos_slot) + int(t);
  const bool pos_ok = pos >= 0 && uint(pos) < pc.n_pos;
  for (uint i = tid; i < pc.D; i += WG) {
    float o = sv[i];
    if (i < 2 * half_rot) {
      const uint pi = i < half_rot ? i : i - half_rot;
      const uint tb = pc.off_t + (uint(pos) * half_rot + pi) * 2;
      const float c = pos_ok ? rope[tb] : 0.0 / 0.0, s = pos_ok ? rope[tb + 1] : 0.0 / 0.0;
      o = i < half_rot ? sv[i] * c - sv[i + half_rot] * s : sv[pi] * s + sv[i] * c;
    }
    x[xb + i] = o;
  }
}
