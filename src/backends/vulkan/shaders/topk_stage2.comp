#version 450
// Top-k, stage 2: one workgroup per row merges the chunks' candidates (k rounds of a workgroup
// argmax over the candidate list in scratch; selected candidates are marked in a shared bit
// set, n_chunks * k <= 8192), and computes the
// row's max M = max M_c and total = sum_c S_c exp((M_c - M) * inv_temp).
// Outputs: ids, values [row*k + j], probs = exp((v - M) * inv_temp) / total, stats [2 row] =
// (M, total). Bindings: 1 scratch, 2 ids (int32), 3 values, 4 probs, 5 stats.
#include "common.glsl"
#include "reduce.glsl"

layout(set = 0, binding = 1) readonly buffer SB { float scratch[]; };

shared uint taken_bits[256];
layout(set = 0, binding = 2) writeonly buffer IB { int ids[]; };
layout(set = 0, binding = 3) writeonly buffer VB { float vals[]; };
layout(set = 0, binding = 4) writeonly buffer PB { float probs[]; };
layout(set = 0, binding = 5) writeonly buffer TB { float stats[]; };

layout(push_constant) uniform PC {
  uint off_s, off_i, off_v, off_p, off_t;
  uint k, n_chunks;
  float inv_temp;
} pc;

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint row = gl_WorkGroupID.x;
  const uint rec = 2 + 2 * pc.k;
  const uint rbase = pc.off_s + row * pc.n_chunks * rec;
  float lm = -1.0 / 0.0;
  for (uint c = tid; c < pc.n_chunks; c += WG) lm = max(lm, scratch[rbase + c * rec]);
  const float M = wg_max(lm);
  float ls = 0.0;
  for (uint c = tid; c < pc.n_chunks; c += WG) {
    const float mc = scratch[rbase + c * rec];
    if (mc > -1.0 / 0.0) ls += scratch[rbase + c * rec + 1] * exp((mc - M) * pc.inv_temp);
  }
  const float total = wg_sum(ls);
  const uint n_cand = pc.n_chunks * pc.k;
  for (uint i = tid; i < 256; i += WG) taken_bits[i] = 0;
  barrier();
  for (uint j = 0; j < pc.k; ++j) {
    float best = -1.0 / 0.0;
    uint best_id = 0xffffffffu, best_c = 0xffffffffu;
    for (uint c = tid; c < n_cand; c += WG) {
      const uint at = rbase + (c / pc.k) * rec + 2 + 2 * (c % pc.k);
      const float v = scratch[at];
      const uint id = floatBitsToUint(scratch[at + 1]);
      if ((taken_bits[c / 32] & (1u << (c % 32))) != 0) continue;
      if (id != 0xffffffffu && (v > best || (v == best && id < best_id))) {
        best = v;
        best_id = id;
        best_c = c;
      }
    }
    const uint w = wg_argmax(best, best_id);
    if (w != 0xffffffffu && w == best_id) {  // exactly one invocation holds the winning id
      taken_bits[best_c / 32] |= 1u << (best_c % 32);
      ids[pc.off_i + row * pc.k + j] = int(w);
      vals[pc.off_v + row * pc.k + j] = best;
      probs[pc.off_p + row * pc.k + j] = exp((best - M) * pc.inv_temp) / total;
    } else if (w == 0xffffffffu && tid == 0) {
      ids[pc.off_i + row * pc.k + j] = -1;
      vals[pc.off_v + row * pc.k + j] = -1.0 / 0.0;
      probs[pc.off_p + row * pc.k + j] = 0.0;
    }
    barrier();  // the taken mark is visible to the next round
  }
  if (tid == 0) {
    stats[pc.off_t + 2 * row] = M;
    stats[pc.off_t + 2 * row + 1] = total;
  }
}
