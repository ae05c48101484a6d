#version 450
// Weights generated on the device for speed tests (bench/gpu_check.sh: a 40-layer model without
// a 20 GB file). Pass 1 (mode 0-3) fills 32-bit words from a hash of (seed, index); pass 2
// (mode 4) overwrites each quantization block's f16 scale(s) with small finite values, so every
// block dequantizes to finite numbers of about 1e-3 per quant step. Not a model: the values are
// noise of a plausible size. Bindings: 1 the weights as uint words, 2 the same range as uint16.
#include "common.glsl"

layout(set = 0, binding = 1) writeonly buffer W32 { uint w32[]; };
layout(set = 0, binding = 2) writeonly buffer W16 { uint16_t w16[]; };

layout(push_constant) uniform PC {
  uint off32, off16;
  uint n;             // words (modes 0-3) or blocks (mode 4)
  uint mode;          // 0 random bits, 1 f32, 2 f16 pairs, 3 bf16 pairs, 4 block scales
  uint seed;
  uint block_halves;  // mode 4: halves per block
  uint scale_at;      // mode 4: half index of d inside the block
  uint second_at;     // mode 4: half index of dmin (K-quants), or 0xffffffff
  uint groups_x;
} pc;

uint hash(uint x) {  // lowbias32 (Chris Wellons)
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// Uniform in [-0.05, 0.05) from 24 hash bits.
float small(uint h) { return (float(h >> 8) * (1.0 / 16777216.0) - 0.5) * 0.1; }

void main() {
  const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.z * pc.groups_x) * WG + gl_LocalInvocationID.x;
  if (i >= pc.n) return;
  const uint h = hash(i * 0x9e3779b9u ^ hash(pc.seed));
  if (pc.mode == 0u) {
    w32[pc.off32 + i] = h;
  } else if (pc.mode == 1u) {
    w32[pc.off32 + i] = floatBitsToUint(small(h));
  } else if (pc.mode == 2u) {
    w32[pc.off32 + i] = f32_to_f16(small(h)) | (f32_to_f16(small(hash(h))) << 16);
  } else if (pc.mode == 3u) {
    w32[pc.off32 + i] = (floatBitsToUint(small(h)) >> 16) | (floatBitsToUint(small(hash(h))) & 0xffff0000u);
  } else {
    // d in [2^-10, 2^-9): exponent 5 (biased), random mantissa; dmin the same.
    const uint base = pc.off16 + i * pc.block_halves;
    w16[base + pc.scale_at] = uint16_t(0x1400u | (h & 0x3ffu));
    if (pc.second_at != 0xffffffffu) w16[base + pc.second_at] = uint16_t(0x1400u | ((h >> 10) & 0x3ffu));
  }
}
