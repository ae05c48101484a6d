// Workgroup and segment reductions with a subgroup path (USE_SUBGROUP=1) and a shared-memory
// path (USE_SUBGROUP=0). WG must be a power of two; on the subgroup path WG is a multiple of the
// subgroup size SG and subgroups are whole and contiguous (the runtime asks for full subgroups).
// Every function contains barriers: call it from uniform control flow.
shared float red_f[WG];
shared uint red_u[WG];

float wg_sum(float v) {
  const uint tid = gl_LocalInvocationID.x;
#if USE_SUBGROUP
  v = subgroupAdd(v);
  if (gl_SubgroupInvocationID == 0) red_f[gl_SubgroupID] = v;
  barrier();
  float s = 0.0;
  for (uint i = 0; i < gl_NumSubgroups; ++i) s += red_f[i];
  barrier();
  return s;
#else
  red_f[tid] = v;
  barrier();
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) red_f[tid] += red_f[tid + s];
    barrier();
  }
  const float r = red_f[0];
  barrier();
  return r;
#endif
}

float wg_max(float v) {
  const uint tid = gl_LocalInvocationID.x;
#if USE_SUBGROUP
  v = subgroupMax(v);
  if (gl_SubgroupInvocationID == 0) red_f[gl_SubgroupID] = v;
  barrier();
  float s = red_f[0];
  for (uint i = 1; i < gl_NumSubgroups; ++i) s = max(s, red_f[i]);
  barrier();
  return s;
#else
  red_f[tid] = v;
  barrier();
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) red_f[tid] = max(red_f[tid], red_f[tid + s]);
    barrier();
  }
  const float r = red_f[0];
  barrier();
  return r;
#endif
}

uint wg_min_u(uint v) {
  const uint tid = gl_LocalInvocationID.x;
#if USE_SUBGROUP
  v = subgroupMin(v);
  if (gl_SubgroupInvocationID == 0) red_u[gl_SubgroupID] = v;
  barrier();
  uint s = red_u[0];
  for (uint i = 1; i < gl_NumSubgroups; ++i) s = min(s, red_u[i]);
  barrier();
  return s;
#else
  red_u[tid] = v;
  barrier();
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) red_u[tid] = min(red_u[tid], red_u[tid + s]);
    barrier();
  }
  const uint r = red_u[0];
  barrier();
  return r;
#endif
}

// Sum / max over aligned segments of G contiguous invocations (G a power of two dividing WG);
// every invocation gets its segment's result. The subgroup path shuffles when G <= SG.
float seg_sum(float v, uint G) {
#if USE_SUBGROUP
  if (G <= SG) {
    for (uint m = G / 2; m > 0; m >>= 1) v += subgroupShuffleXor(v, m);
    return v;
  }
#endif
  const uint tid = gl_LocalInvocationID.x;
  red_f[tid] = v;
  barrier();
  for (uint s = G / 2; s > 0; s >>= 1) {
    if ((tid & (G - 1)) < s) red_f[tid] += red_f[tid + s];
    barrier();
  }
  const float r = red_f[tid & ~(G - 1)];
  barrier();
  return r;
}

float seg_max(float v, uint G) {
#if USE_SUBGROUP
  if (G <= SG) {
    for (uint m = G / 2; m > 0; m >>= 1) v = max(v, subgroupShuffleXor(v, m));
    return v;
  }
#endif
  const uint tid = gl_LocalInvocationID.x;
  red_f[tid] = v;
  barrier();
  for (uint s = G / 2; s > 0; s >>= 1) {
    if ((tid & (G - 1)) < s) red_f[tid] = max(red_f[tid], red_f[tid + s]);
    barrier();
  }
  const float r = red_f[tid & ~(G - 1)];
  barrier();
  return r;
}

uint seg_min_u(uint v, uint G) {
#if USE_SUBGROUP
  if (G <= SG) {
    for (uint m = G / 2; m > 0; m >>= 1) v = min(v, subgroupShuffleXor(v, m));
    return v;
  }
#endif
  const uint tid = gl_LocalInvocationID.x;
  red_u[tid] = v;
  barrier();
  for (uint s = G / 2; s > 0; s >>= 1) {
    if ((tid & (G - 1)) < s) red_u[tid] = min(red_u[tid], red_u[tid + s]);
    barrier();
  }
  const uint r = red_u[tid & ~(G - 1)];
  barrier();
  return r;
}

// Argmax over the workgroup by (value descending, index ascending); NaN never wins.
// Returns the winner's index (0xffffffff when every value is -inf or NaN... then index of none).
uint wg_argmax(float v, uint idx) {
  if (isnan(v)) v = -1.0 / 0.0;
  const float m = wg_max(v);
  return wg_min_u(v == m ? idx : 0xffffffffu);
}
