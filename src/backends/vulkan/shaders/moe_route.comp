#version 450
// MoE router tail, one workgroup per token (kernels/ref.cc TopKSoftmax): softmax over the
// n_expert logits, the k experts with the largest logits (ties: lower id; the same order as
// the probabilities), weights = p / max(sum of the k p, 6.103515625e-5).
// Bindings: 1 logits (f32), 2 ids (int32 [t*k + j]), 3 weights (f32 [t*k + j]).
#include "common.glsl"
#include "reduce.glsl"

layout(set = 0, binding = 1) readonly buffer LB { float logits[]; };
layout(set = 0, binding = 2) writeonly buffer IB { int ids[]; };
layout(set = 0, binding = 3) writeonly buffer WB { float weights[]; };

layout(push_constant) uniform PC {
  uint off_l, off_i, off_w;
  uint ld, n_expert, k;
} pc;

shared float sl[1024];  // logits, taken ones set to -inf
shared float sp[1024];  // probabilities
shared float sel_w[64];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint t = gl_WorkGroupID.x;
  const uint lb = pc.off_l + t * pc.ld;
  float m = -1.0 / 0.0;
  for (uint i = tid; i < pc.n_expert; i += WG) {
    sl[i] = logits[lb + i];
    m = max(m, sl[i]);
  }
  m = wg_max(m);
  float s = 0.0;
  for (uint i = tid; i < pc.n_expert; i += WG) {
    sp[i] = exp(sl[i] - m);
    s += sp[i];
  }
  const float inv = 1.0 / wg_sum(s);
  for (uint i = tid; i < pc.n_expert; i += WG) sp[i] *= inv;
  barrier();
  for (uint j = 0; j < pc.k; ++j) {
    float best = -1.0 / 0.0;
    uint best_i = 0xffffffffu;
    for (uint i = tid; i < pc.n_expert; i += WG) {
      if (sl[i] > best) {  // i increases: ties keep the lower id
        best = sl[i];
        best_i = i;
      }
    }
    const uint w = wg_argmax(best, best_i);
    if (tid == 0) {
      ids[pc.off_i + t * pc.k + j] = int(w);
      sel_w[j] = sp[w];
      sl[w] = -1.0 / 0.0;
    }
    barrier();
  }
  if (tid == 0) {
    float sum = 0.0;
    for (uint j = 0; j < pc.k; ++j) sum += sel_w[j];
    const float denom = max(sum, 6.103515625e-5);
    for (uint j = 0; j < pc.k; ++j) weights[pc.off_w + t * pc.k + j] = sel_w[j] / denom;
  }
}
