// Byte layouts of the GGML quantization blocks (ggml-common.h of the GGUF format).
// Only layouts live here; reference (de)quantization is in core/quant.h.
#pragma once

#include <cstdint>

namespace crossword {

constexpr int kQK4_0 = 32;
constexpr int kQK4_1 = 32;
constexpr int kQK5_0 = 32;
constexpr int kQK5_1 = 32;
constexpr int kQK8_0 = 32;
constexpr int kQK8_1 = 32;
constexpr int kQK_K = 256;       ///< super-block size of the K-quants
constexpr int kKScaleSize = 12;  ///< packed 6-bit scales/mins of Q4_K and Q5_K

// All half fields hold IEEE binary16 bits (see base/fp16.h).

/// x = d * (q - 8), q in [0,16): qs[j] low nibble = element j, high nibble = element j + 16.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};
/// x = d * q + m.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK4_1 / 2];
};
/// x = d * (q - 16), 5th bit of element j in bit j of qh.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};
/// x = d * q + m.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
/// x = d * q.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};
/// x = d * q; s = d * sum(q) (used as an activation format).
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK8_1];
};
/// 16 sub-blocks of 16: scales[i] low nibble = scale, high nibble = min; 2-bit quants.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
/// 16 sub-blocks of 16: 3-bit quants (2 low bits in qs, high bit in hmask), 6-bit scales.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
/// 8 sub-blocks of 32: x = d * sc * q - dmin * m, 6-bit sc/m packed in scales[12].
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQK_K / 2];
};
/// As Q4_K with a 5th bit per element in qh.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
/// 16 sub-blocks of 16: x = d * scales[i] * (q - 32), q 6-bit (4 low in ql, 2 high in qh).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
/// Activation format of the K-quant dot products: float scale, int8 quants, sums of 16.
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace crossword
