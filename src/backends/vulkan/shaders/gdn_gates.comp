#version 450
// GDN gates per token and v-head (model GdnLayer): beta = sigmoid(b),
// g = softplus(a + dt_bias) * ssm_a (ssm_a = -exp(A_log) as stored; softplus(x) = x > 20 ? x :
// log1p(exp(x)), kernels::Softplus). Elementwise, no reduction.
// Bindings: 1 b, 2 a, 3 dt_bias, 4 ssm_a, 5 g, 6 beta.
#include "common.glsl"

layout(set = 0, binding = 1) readonly buffer BB { float bl[]; };
layout(set = 0, binding = 2) readonly buffer AB { float al[]; };
layout(set = 0, binding = 3) readonly buffer DB { float dt_bias[]; };
layout(set = 0, binding = 4) readonly buffer SB { float ssm_a[]; };
layout(set = 0, binding = 5) writeonly buffer GB { float g[]; };
layout(set = 0, binding = 6) writeonly buffer EB { float beta[]; };

layout(push_constant) uniform PC {
  uint off_b, off_a, off_dt, off_sa, off_g, off_beta;
  uint ldb, lda, ldg, n_tokens, n_v;
} pc;

// log(1 + y) for y >= 0. Vulkan's log() is only accurate to 2^-21 absolute on [0.5, 2], which
// is a large relative error for small results, so y <= 1 uses 2 atanh(z), z = y / (2 + y)
// <= 1/3: 2 (z + z^3/3 + ... + z^23/23), truncation below 1e-12 relative.
float log1p_f(float y) {
  if (y > 1.0) return log(1.0 + y);
  const float z = y / (2.0 + y), z2 = z * z;
  float s = 1.0 / 23.0;
  for (int n = 21; n >= 1; n -= 2) s = s * z2 + 1.0 / float(n);
  return 2.0 * z * s;
}

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= pc.n_tokens * pc.n_v) return;
  const uint t = i / pc.n_v, hd = i % pc.n_v;
  beta[pc.off_beta + t * pc.ldg + hd] = sigmoid_f(bl[pc.off_b + t * pc.ldb + hd]);
  const float x = al[pc.off_a + t * pc.lda + hd] + dt_bias[pc.off_dt + hd];
  const float sp = x > 20.0 ? x : log1p_f(exp(x));
  g[pc.off_g + t * pc.ldg + hd] = sp * ssm_a[pc.off_sa + hd];
}
