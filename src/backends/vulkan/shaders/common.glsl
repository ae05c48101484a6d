// Included first by every compute shader of the Vulkan backend (after #version).
//
// Conventions (docs/gpu.md):
// - set 0, binding 0: the per-step parameter buffer (int32 words, see DynInt in commands.h);
//   bindings 1.. belong to the op, in the order of its Binding list.
// - push constants start with one uint per op binding: that binding's element offset (the
//   runtime binds descriptors at aligned offsets and passes the rest here).
// - specialization constant 0 = workgroup size (local_size_x), 1 = subgroup size; further
//   constants are per shader.
// - USE_SUBGROUP (1 or 0) selects subgroup arithmetic or shared-memory-only reductions.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_EXT_control_flow_attributes : enable
#if USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint SG = 32;

layout(set = 0, binding = 0) readonly buffer Params { int params[]; };

// A DynInt: `value` when slot < 0, else the parameter word `slot`.
int dyn(int value, int slot) { return slot >= 0 ? params[slot] : value; }

// IEEE binary16 bits of f, round to nearest even (bit-exact with base/fp16.h F32ToF16; the
// GLSL packHalf2x16 rounding mode is not specified).
uint f32_to_f16(float f) {
  const uint x = floatBitsToUint(f);
  const uint sign = (x >> 16) & 0x8000u;
  const uint ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {
    return sign | (ax > 0x7f800000u ? (0x7e00u | ((ax >> 13) & 0x3ffu)) : 0x7c00u);
  }
  if (ax >= 0x477ff000u) return sign | 0x7c00u;
  if (ax < 0x38800000u) {  // subnormal or zero: round mant * 2^(e - 126) to an integer
    const uint e = ax >> 23;
    if (e < 102u) return sign;  // below 2^-25: rounds to zero
    const uint m = (ax & 0x7fffffu) | 0x800000u;
    const uint shift = 126u - e;  // 14 .. 24
    uint q = m >> shift;
    const uint rem = m & ((1u << shift) - 1u);
    const uint half_ulp = 1u << (shift - 1u);
    if (rem > half_ulp || (rem == half_ulp && (q & 1u) != 0u)) q += 1u;
    return sign | q;
  }
  uint m = ax + 0xc8000000u;
  m += 0x0fffu + ((m >> 13) & 1u);
  return sign | (m >> 13);
}

float f16_to_f32(uint h) { return unpackHalf2x16(h).x; }

// a / b rounded as an IEEE division would be (the CPU twins divide exactly and quantization
// scales must agree; Vulkan allows 2.5 ulp for OpFDiv, and lavapipe multiplies by a
// reciprocal). One correction with the exact residual a - q*b from Dekker's two-product
// (Veltkamp splits; `precise` forbids contraction, since Vulkan lets fma() be unfused).
float precise_div(float a, float b) {
  precise float q = a / b;
  if (!(abs(q) < 1e30) || !(abs(b) < 1e30)) return q;  // the splits would overflow
  precise float cq = 4097.0 * q;
  precise float qh = cq - (cq - q);
  precise float ql = q - qh;
  precise float cb = 4097.0 * b;
  precise float bh = cb - (cb - b);
  precise float bl = b - bh;
  precise float p = q * b;
  precise float e = ((qh * bh - p) + qh * bl + ql * bh) + ql * bl;
  precise float r = (a - p) - e;
  precise float res = q + r / b;
  return res;
}

float sigmoid_f(float x) { return 1.0 / (1.0 + exp(-x)); }
float silu_f(float x) { return x / (1.0 + exp(-x)); }
