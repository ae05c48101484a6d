#version 450
// The gated delta rule token by token (kernels/ref_seq.cc GatedDeltaRule): per v-head hv
// (k-head hv % n_k), with S = state[hv] ([dv][dk], S[j][i]) and for each token:
//   S *= exp(g); kv = S k; d = (v - kv) beta; S += d k^T; o = scale S q.
// o uses the fused form scale (S_decayed q + d (k . q)), as the CPU kernel.
// Workgroup: ROWS_PER_WG = WG / LANES value rows j of one head; each row's dk entries are spread
// over LANES invocations (entry i = lane + LANES m) and live in registers for all T tokens
// (state read and written once per call). k and q of each token go through shared memory; the
// three dot products of a row are reduced over its LANES invocations (subgroup shuffles when
// LANES <= subgroup size, else shared memory). T may be a parameter slot (rollback replays).
// Bindings: 1 q, 2 k, 3 v, 4 g, 5 beta, 6 state_in, 7 state_out, 8 out, 9 state0 record.
#include "common.glsl"
#include "reduce.glsl"

layout(constant_id = 2) const uint LANES = 8;
layout(constant_id = 3) const uint PER_LANE = 16;  // ceil(dk / LANES): state entries per lane
const uint ROWS_PER_WG = WG / LANES;

layout(set = 0, binding = 1) readonly buffer QB { float q[]; };
layout(set = 0, binding = 2) readonly buffer KB { float kk[]; };
layout(set = 0, binding = 3) readonly buffer VB { float v[]; };
layout(set = 0, binding = 4) readonly buffer GB { float g[]; };
layout(set = 0, binding = 5) readonly buffer BB { float beta[]; };
layout(set = 0, binding = 6) readonly buffer SIB { float sin_[]; };
layout(set = 0, binding = 7) writeonly buffer SOB { float sout[]; };
layout(set = 0, binding = 8) writeonly buffer OB { float o[]; };
layout(set = 0, binding = 9) writeonly buffer RB { float rec[]; };

layout(push_constant) uniform PC {
  uint off_q, off_k, off_v, off_g, off_b, off_si, off_so, off_o, off_r;
  int t_val, t_slot;
  uint n_k, dk, dv;
  uint ldq, ldk, ldv, ldg, ldo;
  float scale;
  uint record;
} pc;

shared float ksh[256];
shared float qsh[256];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint hv = gl_WorkGroupID.y;
  const uint hk = hv % pc.n_k;
  const uint j = gl_WorkGroupID.x * ROWS_PER_WG + tid / LANES;
  const uint lane = tid % LANES;
  const bool row_ok = j < pc.dv;
  const uint sbase = (hv * pc.dv + j) * pc.dk;
  float s[PER_LANE];
  [[unroll]] for (uint m = 0; m < PER_LANE; ++m) {
    const uint i = lane + LANES * m;
    s[m] = row_ok && i < pc.dk ? sin_[pc.off_si + sbase + i] : 0.0;
    if (pc.record != 0 && row_ok && i < pc.dk) rec[pc.off_r + sbase + i] = s[m];
  }
  const int T = dyn(pc.t_val, pc.t_slot);
  for (int t = 0; t < T; ++t) {
    barrier();  // the previous token's k and q are no longer read
    for (uint i = tid; i < pc.dk; i += WG) {
      ksh[i] = kk[pc.off_k + uint(t) * pc.ldk + hk * pc.dk + i];
      qsh[i] = q[pc.off_q + uint(t) * pc.ldq + hk * pc.dk + i];
    }
    barrier();
    const float decay = exp(g[pc.off_g + uint(t) * pc.ldg + hv]);
    const float b = beta[pc.off_b + uint(t) * pc.ldg + hv];
    float kv = 0.0, sq = 0.0, kq = 0.0;
    [[unroll]] for (uint m = 0; m < PER_LANE; ++m) {
      const uint i = lane + LANES * m;
      const float ki = i < pc.dk ? ksh[i] : 0.0, qi = i < pc.dk ? qsh[i] : 0.0;
      s[m] *= decay;
      kv += s[m] * ki;
      sq += s[m] * qi;
      kq += ki * qi;
    }
    kv = seg_sum(kv, LANES);
    sq = seg_sum(sq, LANES);
    kq = seg_sum(kq, LANES);
    const float vj = row_ok ? v[pc.off_v + uint(t) * pc.ldv + hv * pc.dv + j] : 0.0;
    const float d = (vj - kv) * b;
    [[unroll]] for (uint m = 0; m < PER_LANE; ++m) {
      const uint i = lane + LANES * m;
      if (i < pc.dk) s[m] += ksh[i] * d;
    }
    if (lane == 0 && row_ok) o[pc.off_o + uint(t) * pc.ldo + hv * pc.dv + j] = pc.scale * (sq + d * kq);
  }
  [[unroll]] for (uint m = 0; m < PER_LANE; ++m) {
    const uint i = lane + LANES * m;
    if (row_ok && i < pc.dk) sout[pc.off_so + sbase + i] = s[m];
  }
}
