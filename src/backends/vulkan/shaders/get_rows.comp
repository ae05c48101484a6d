#version 450
// Embedding rows: out[t][:] = dequantized row ids[t] of the table, for the ids that fall in
// this piece of the table (rows first .. first + count). The piece holding row 0 also writes
// zero rows for ids outside the whole table. One thread per 32-element chunk. No reduction.
// Bindings: 1 table (wtypes.glsl view), 2 ids (int32), 3 out (f32).
#define INT8 0
#include "common.glsl"
#include "wtypes.glsl"

layout(set = 0, binding = 2) readonly buffer IB { int ids[]; };
layout(set = 0, binding = 3) writeonly buffer OB { float outv[]; };

layout(push_constant) uniform PC {
  uint off_w, off_ids, off_out;
  uint n_in;
  uint first, count;  // rows of the table in this piece
  uint n_total;       // rows of the whole table
  uint w_stride;      // units between table rows
  uint ldo;
  uint zeros;  // 1: this piece writes zeros for out-of-range ids
} pc;

void main() {
  const uint t = gl_WorkGroupID.y;
  const uint ch = gl_WorkGroupID.x * WG + gl_LocalInvocationID.x;
  if (ch >= pc.n_in / 32) return;
  const int id = ids[pc.off_ids + t];
  const uint ob = pc.off_out + t * pc.ldo + 32 * ch;
  if (id < 0 || uint(id) >= pc.n_total) {
    if (pc.zeros != 0) {
      for (uint i = 0; i < 32; ++i) outv[ob + i] = 0.0;
    }
    return;
  }
  if (uint(id) < pc.first || uint(id) >= pc.first + pc.count) return;
  for (uint p = 0; p < 4; ++p) {
    float v[8];
    w_part(pc.off_w + (uint(id) - pc.first) * pc.w_stride, ch, p, v);
    for (uint i = 0; i < 8; ++i) outv[ob + 8 * p + i] = v[i];
  }
}
