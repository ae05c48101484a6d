// Scalar IEEE binary16 and bfloat16 conversions, bit-exact with the hardware/ggml rounding
// (round to nearest, ties to even; NaN stays NaN).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace crossword {

/// binary16 bits -> float (exact).
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24
      float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
      bits = std::bit_cast<uint32_t>(f) | sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

/// float -> binary16 bits, round to nearest even (same result as F16C vcvtps2ph with imm 0).
inline uint16_t F32ToF16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or nan
    return sign |
           (ax > 0x7f800000u ? 0x7e00u | static_cast<uint16_t>((ax >> 13) & 0x3ffu) : 0x7c00u);
  }
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520 -> inf
  if (ax < 0x38800000u) {                        // result is subnormal or zero
    // value * 2^24 rounded to integer, ties to even.
    const float v = std::bit_cast<float>(ax) * 16777216.0f;  // exact scaling by power of two
    // Round half to even on a float that is < 1024.
    float r = v + 8388608.0f;  // 2^23 forces rounding to integer in current (nearest-even) mode
    r -= 8388608.0f;
    return sign | static_cast<uint16_t>(r);
  }
  // normal: rebias exponent, round mantissa from 23 to 10 bits, ties to even.
  uint32_t m = ax + 0xc8000000u;  // exponent - 112 (i.e. 127 -> 15)
  m += 0x0fffu + ((m >> 13) & 1u);
  return sign | static_cast<uint16_t>(m >> 13);
}

/// bfloat16 bits -> float (exact).
inline float BF16ToF32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

/// float -> bfloat16 bits, round to nearest even; NaN is quieted (as ggml does).
inline uint16_t F32ToBF16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 64u);
  return static_cast<uint16_t>((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

}  // namespace crossword
