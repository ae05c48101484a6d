#version 450
// Compaction of the (token, expert) pairs of a pass by expert, one workgroup (model MoeLayer's
// grouping): counts per expert, then the used experts in increasing id with their first pair
// and count, and the pairs sorted by expert (token order within an expert). Layout: ops.h
// MoeGroupLayout. No float reduction (shared-memory atomics).
// Bindings: 1 ids (int32 [pair]), 2 group (int32).
#include "common.glsl"

layout(set = 0, binding = 1) readonly buffer IB { int ids[]; };
layout(set = 0, binding = 2) writeonly buffer GB { int grp[]; };

layout(push_constant) uniform PC {
  uint off_i, off_g;
  uint n_pairs, k, n_expert;
  uint act_off, pair_token, pair_row;
} pc;

shared uint cnt[1024];
shared uint offs[1024];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  for (uint e = tid; e < pc.n_expert; e += WG) cnt[e] = 0;
  barrier();
  for (uint p = tid; p < pc.n_pairs; p += WG) {
    const uint e = uint(ids[pc.off_i + p]);
    if (e < pc.n_expert) atomicAdd(cnt[e], 1u);
  }
  barrier();
  if (tid == 0) {
    uint run = 0, na = 0;
    for (uint e = 0; e < pc.n_expert; ++e) {
      offs[e] = run;
      if (cnt[e] > 0) {
        grp[pc.off_g + pc.act_off + 3 * na] = int(e);
        grp[pc.off_g + pc.act_off + 3 * na + 1] = int(run);
        grp[pc.off_g + pc.act_off + 3 * na + 2] = int(cnt[e]);
        ++na;
      }
      run += cnt[e];
    }
    grp[pc.off_g] = int(na);
  }
  barrier();
  for (uint p = tid; p < pc.n_pairs; p += WG) {
    const uint e = uint(ids[pc.off_i + p]);
    if (e >= pc.n_expert) continue;
    uint rank = 0;
    for (uint q = 0; q < p; ++q) rank += uint(ids[pc.off_i + q]) == e ? 1u : 0u;
    const uint pos = offs[e] + rank;
    grp[pc.off_g + pc.pair_token + pos] = int(p / pc.k);
    grp[pc.off_g + pc.pair_row + pos] = int(p);
  }
}
