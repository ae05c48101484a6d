// Reference (de)quantization of the GGML block formats. Each routine follows the published
// reference algorithm step by step, in the same float operation order, so results are bit-exact.
#include "core/quant.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "base/error.h"
#include "base/fp16.h"

namespace crossword {
namespace {

// Below this largest magnitude a Q6_K/Q4_K group counts as all zeros (ggml GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, via the float adder: adding 1.5 * 2^23 pushes the fraction out
// of the mantissa. Valid for |f| <= 2^22 - 1 (the range every caller stays in); no UB otherwise.
inline int NearestInt(float f) {
  const float v = f + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &v, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

// C's (int)f for the finite, in-range values the legacy quantizers produce; 0 for NaN/huge
// inputs, where the C cast would be undefined.
inline int TruncInt(float f) {
  if (!(f > -2147483648.0f && f < 2147483648.0f)) return 0;
  return static_cast<int>(f);
}

inline float H2F(uint16_t h) { return F16ToF32(h); }
inline uint16_t F2H(float f) { return F32ToF16(f); }

// The element of largest magnitude (first one on ties), and that magnitude.
inline void SignedAbsMax(const float* x, int n, float* max, float* amax) {
  *max = 0.0f;
  *amax = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float a = std::fabs(x[j]);
    if (*amax < a) {
      *amax = a;
      *max = x[j];
    }
  }
}

// 6-bit scale and min of sub-block j from the 12 packed bytes of Q4_K/Q5_K.
inline void ScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Symmetric scale search of ggml make_qx_quants with rmse_type 1 (weights x^2) and no
// importance weights: L[i] in [0, 2*nmax), returns the scale.
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = NearestInt(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    const float fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      const float fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = NearestInt(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Asymmetric (scale, min) search of ggml make_qkx2_quants with squared error: L[i] in
// [0, nmax]; stores -min in *the_min and returns the scale.
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                     float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    const float diff = scale * static_cast<float>(L[i]) + min - x[i];
    best_error += weights[i] * (diff * diff);
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        cur_error += weights[i] * (diff * diff);
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Runs `fn(typed_src, dst, n)` on blocks that may be unaligned by copying them through an
// aligned local buffer when needed.
template <class Block, class Fn>
void DequantizeBlocks(const void* src, float* dst, int64_t n, int64_t block_elems, Fn fn) {
  if (reinterpret_cast<uintptr_t>(src) % alignof(Block) == 0) {
    fn(static_cast<const Block*>(src), dst, n);
    return;
  }
  const auto* bytes = static_cast<const unsigned char*>(src);
  Block tmp;
  for (int64_t i = 0; i < n / block_elems; ++i) {
    std::memcpy(&tmp, bytes + i * sizeof(Block), sizeof(Block));
    fn(&tmp, dst + i * block_elems, block_elems);
  }
}

template <class Block, class Fn>
void QuantizeBlocks(const float* src, void* dst, int64_t n, int64_t block_elems, Fn fn) {
  if (reinterpret_cast<uintptr_t>(dst) % alignof(Block) == 0) {
    fn(src, static_cast<Block*>(dst), n);
    return;
  }
  auto* bytes = static_cast<unsigned char*>(dst);
  Block tmp;
  for (int64_t i = 0; i < n / block_elems; ++i) {
    fn(src + i * block_elems, &tmp, block_elems);
    std::memcpy(bytes + i * sizeof(Block), &tmp, sizeof(Block));
  }
}

void CheckCount(GgmlType type, int64_t n, const char* what) {
  const TypeTraits& t = GetTypeTraits(type);
  Check(n >= 0 && n % t.block_size == 0,
        "{}: element count {} is not a multiple of the {} block size {}", what, n, t.name,
        t.block_size);
}

}  // namespace

// ---- Dequantization ---------------------------------------------------------------------

void DequantizeRowQ4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; ++i, y += kQK4_0) {
    const float d = H2F(x[i].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + kQK4_0 / 2] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantizeRowQ4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_1; ++i, y += kQK4_1) {
    const float d = H2F(x[i].d);
    const float m = H2F(x[i].m);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0x0F) * d + m;
      y[j + kQK4_1 / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void DequantizeRowQ5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_0; ++i, y += kQK5_0) {
    const float d = H2F(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      y[j] = static_cast<float>(((x[i].qs[j] & 0x0F) | h0) - 16) * d;
      y[j + kQK5_0 / 2] = static_cast<float>(((x[i].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

void DequantizeRowQ5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_1; ++i, y += kQK5_1) {
    const float d = H2F(x[i].d);
    const float m = H2F(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) | h0) * d + m;
      y[j + kQK5_1 / 2] = static_cast<float>((x[i].qs[j] >> 4) | h1) * d + m;
    }
  }
}

void DequantizeRowQ8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i, y += kQK8_0) {
    const float d = H2F(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void DequantizeRowQ8_1(const BlockQ8_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_1; ++i, y += kQK8_1) {
    const float d = H2F(x[i].d);
    for (int j = 0; j < kQK8_1; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void DequantizeRowQ2_K(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = H2F(x[i].d);
    const float dmin = H2F(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    // Each 128-element half uses 32 bytes of qs; element groups of 32 take successive 2-bit
    // planes, and each group of 16 has its own 4-bit scale/min pair.
    for (int half = 0; half < kQK_K; half += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * static_cast<float>(sc & 0xF);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) {
            *y++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
          }
        }
      }
    }
  }
}

void DequantizeRowQ3_K(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d_all = H2F(x[i].d);
    // 16 6-bit scales: low 4 bits in bytes 0..7 (two per byte), high 2 bits in bytes 8..11.
    int8_t scales[16];
    const uint8_t* s = x[i].scales;
    for (int j = 0; j < 16; ++j) {
      const int low = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
      const int high = (s[8 + (j % 4)] >> (2 * (j / 4))) & 3;
      scales[j] = static_cast<int8_t>(low | (high << 4));
    }
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    uint8_t m = 1;
    int is = 0;
    for (int half = 0; half < kQK_K; half += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d_all * static_cast<float>(scales[is++] - 32);
          for (int l = 0; l < 16; ++l) {
            const int idx = l + 16 * part;
            const int v = ((q[idx] >> shift) & 3) - ((hm[idx] & m) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

void DequantizeRowQ4_K(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* q = x[i].qs;
    const float d = H2F(x[i].d);
    const float min = H2F(x[i].dmin);
    uint8_t sc, m;
    for (int is = 0; is < 8; is += 2, q += 32) {
      ScaleMinK4(is, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      ScaleMinK4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void DequantizeRowQ5_K(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const float d = H2F(x[i].d);
    const float min = H2F(x[i].dmin);
    uint8_t sc, m;
    uint8_t u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
      ScaleMinK4(is, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      ScaleMinK4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) {
        *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
      }
    }
  }
}

void DequantizeRowQ6_K(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = H2F(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int half = 0; half < kQK_K; half += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void DequantizeRowQ8_K(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    for (int j = 0; j < kQK_K; ++j) *y++ = x[i].d * static_cast<float>(x[i].qs[j]);
  }
}

// ---- Quantization -----------------------------------------------------------------------

void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; ++i, x += kQK4_0) {
    float max, amax;
    SignedAbsMax(x, kQK4_0, &max, &amax);
    const float d = max / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F2H(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int q0 = std::min(15, TruncInt(x[j] * id + 8.5f));
      const int q1 = std::min(15, TruncInt(x[j + kQK4_0 / 2] * id + 8.5f));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void QuantizeRowQ4_1(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_1; ++i, x += kQK4_1) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kQK4_1; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F2H(d);
    y[i].m = F2H(min);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const int q0 = std::min(15, TruncInt((x[j] - min) * id + 0.5f));
      const int q1 = std::min(15, TruncInt((x[j + kQK4_1 / 2] - min) * id + 0.5f));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void QuantizeRowQ5_0(const float* x, BlockQ5_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_0; ++i, x += kQK5_0) {
    float max, amax;
    SignedAbsMax(x, kQK5_0, &max, &amax);
    const float d = max / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F2H(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const int q0 = std::min(31, TruncInt(x[j] * id + 16.5f));
      const int q1 = std::min(31, TruncInt(x[j + kQK5_0 / 2] * id + 16.5f));
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + kQK5_0 / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

void QuantizeRowQ5_1(const float* x, BlockQ5_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_1; ++i, x += kQK5_1) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kQK5_1; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F2H(d);
    y[i].m = F2H(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      // The reference casts to uint8_t without clamping; values stay in [0, 31].
      const int q0 = TruncInt((x[j] - min) * id + 0.5f) & 0xFF;
      const int q1 = TruncInt((x[j + kQK5_1 / 2] - min) * id + 0.5f) & 0xFF;
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + kQK5_1 / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i, x += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F2H(d);
    for (int j = 0; j < kQK8_0; ++j)
      y[i].qs[j] = static_cast<int8_t>(TruncInt(std::round(x[j] * id)));
  }
}

void QuantizeRowQ8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_1; ++i, x += kQK8_1) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_1; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F2H(d);
    int sum = 0;
    for (int j = 0; j < kQK8_1; ++j) {
      y[i].qs[j] = static_cast<int8_t>(TruncInt(std::round(x[j] * id)));
      sum += y[i].qs[j];
    }
    y[i].s = F2H(static_cast<float>(sum) * d);
  }
}

namespace {

// Shared part of the Q4_K and Q5_K quantizers: per sub-block of 32 a weighted (scale, min)
// search with quants in [0, nmax], 6-bit scales/mins packed into `scales`, then every element
// requantized against the decoded scales. Writes the 256 quants to L.
void QuantizeScaleMinSuperBlock(const float* x, int nmax, float rmin, int nstep, uint8_t* packed,
                                uint16_t* d_out, uint16_t* dmin_out, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32];
  float mins[kQK_K / 32];
  float scales[kQK_K / 32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kQK_K / 32; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] =
        MakeQkx2Quants(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  std::memset(packed, 0, kKScaleSize);
  for (int j = 0; j < kQK_K / 32; ++j) {
    // The reference stores nearest_int into a uint8_t before clamping to 63.
    const uint8_t ls =
        std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_min * mins[j])));
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {
      packed[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      packed[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      packed[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  *d_out = F2H(max_scale / 63.0f);
  *dmin_out = F2H(max_min / 63.0f);
  // Requantize against the scales as they will be decoded (fp16 d times 6-bit sc).
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, m;
    ScaleMinK4(j, packed, &sc, &m);
    const float d = H2F(*d_out) * sc;
    if (d == 0.0f) continue;
    const float dm = H2F(*dmin_out) * m;
    for (int l = 0; l < 32; ++l) {
      const int q = NearestInt((x[32 * j + l] + dm) / d);
      L[32 * j + l] = static_cast<uint8_t>(std::max(0, std::min(nmax, q)));
    }
  }
}

}  // namespace

void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t n) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    QuantizeScaleMinSuperBlock(x, 15, -1.0f, 20, y[i].scales, &y[i].d, &y[i].dmin, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void QuantizeRowQ5_K(const float* x, BlockQ5_K* y, int64_t n) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    QuantizeScaleMinSuperBlock(x, 31, -0.5f, 15, y[i].scales, &y[i].d, &y[i].dmin, L);
    // Low 4 bits as in Q4_K; the 5th bit of chunk c (64 elements) goes to bits 2c and 2c+1.
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    uint8_t* ql = y[i].qs;
    uint8_t m1 = 1, m2 = 2;
    for (int j = 0; j < kQK_K; j += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
      for (int l = 0; l < 32; ++l) {
        int l1 = L[j + l], l2 = L[j + l + 32];
        if (l1 > 15) {
          l1 -= 16;
          y[i].qh[l] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          y[i].qh[l] |= m2;
        }
        ql[l] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
    }
  }
}

void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t n) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      const float scale = MakeQxQuants(16, 32, x + 16 * ib, L + 16 * ib);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.0f / max_scale;
    y[i].d = F2H(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      y[i].scales[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[ib])));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = H2F(y[i].d) * static_cast<float>(y[i].scales[j]);
      if (d == 0.0f) continue;
      for (int l = 0; l < 16; ++l) {
        const int q = NearestInt(x[16 * j + l] / d);
        L[16 * j + l] = static_cast<int8_t>(std::max(-32, std::min(31, q)) + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
        ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) |
                                     ((q4 >> 4) << 6));
      }
    }
  }
}

void QuantizeRowQ8_K(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      // The reference leaves bsums untouched here; zero is their correct value.
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * x[j])));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * j + l];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

// ---- Dispatch ---------------------------------------------------------------------------

bool CanDequantize(GgmlType type) {
  switch (type) {
    case GgmlType::kI8:
    case GgmlType::kI16:
    case GgmlType::kI32:
    case GgmlType::kI64:
      return false;
    default:
      return true;
  }
}

bool CanQuantize(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ8_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kQ8_K:
      return true;
    default:
      return false;
  }
}

void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  CheckCount(type, n, "DequantizeRow");
  // A zero-element tensor (legal in GGUF) may come with null pointers; memcpy must not see them.
  // An unsupported type still fails below.
  if (n == 0 && CanDequantize(type)) return;
  const auto* b = static_cast<const unsigned char*>(src);
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        dst[i] = type == GgmlType::kF16 ? F16ToF32(h) : BF16ToF32(h);
      }
      return;
    case GgmlType::kF64:
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, b + 8 * i, 8);
        dst[i] = static_cast<float>(v);
      }
      return;
    case GgmlType::kQ4_0:
      return DequantizeBlocks<BlockQ4_0>(src, dst, n, kQK4_0, DequantizeRowQ4_0);
    case GgmlType::kQ4_1:
      return DequantizeBlocks<BlockQ4_1>(src, dst, n, kQK4_1, DequantizeRowQ4_1);
    case GgmlType::kQ5_0:
      return DequantizeBlocks<BlockQ5_0>(src, dst, n, kQK5_0, DequantizeRowQ5_0);
    case GgmlType::kQ5_1:
      return DequantizeBlocks<BlockQ5_1>(src, dst, n, kQK5_1, DequantizeRowQ5_1);
    case GgmlType::kQ8_0:
      return DequantizeBlocks<BlockQ8_0>(src, dst, n, kQK8_0, DequantizeRowQ8_0);
    case GgmlType::kQ8_1:
      return DequantizeBlocks<BlockQ8_1>(src, dst, n, kQK8_1, DequantizeRowQ8_1);
    case GgmlType::kQ2_K:
      return DequantizeBlocks<BlockQ2_K>(src, dst, n, kQK_K, DequantizeRowQ2_K);
    case GgmlType::kQ3_K:
      return DequantizeBlocks<BlockQ3_K>(src, dst, n, kQK_K, DequantizeRowQ3_K);
    case GgmlType::kQ4_K:
      return DequantizeBlocks<BlockQ4_K>(src, dst, n, kQK_K, DequantizeRowQ4_K);
    case GgmlType::kQ5_K:
      return DequantizeBlocks<BlockQ5_K>(src, dst, n, kQK_K, DequantizeRowQ5_K);
    case GgmlType::kQ6_K:
      return DequantizeBlocks<BlockQ6_K>(src, dst, n, kQK_K, DequantizeRowQ6_K);
    case GgmlType::kQ8_K:
      return DequantizeBlocks<BlockQ8_K>(src, dst, n, kQK_K, DequantizeRowQ8_K);
    default:
      Fail("DequantizeRow: type {} holds integers, not a float or quantized format",
           TypeName(type));
  }
}

void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n) {
  CheckCount(type, n, "QuantizeRow");
  if (n == 0 && CanQuantize(type)) return;  // as in DequantizeRow: null pointers, no elements
  auto* b = static_cast<unsigned char*>(dst);
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = type == GgmlType::kF16 ? F32ToF16(src[i]) : F32ToBF16(src[i]);
        std::memcpy(b + 2 * i, &h, 2);
      }
      return;
    case GgmlType::kQ4_0:
      return QuantizeBlocks<BlockQ4_0>(src, dst, n, kQK4_0, QuantizeRowQ4_0);
    case GgmlType::kQ4_1:
      return QuantizeBlocks<BlockQ4_1>(src, dst, n, kQK4_1, QuantizeRowQ4_1);
    case GgmlType::kQ5_0:
      return QuantizeBlocks<BlockQ5_0>(src, dst, n, kQK5_0, QuantizeRowQ5_0);
    case GgmlType::kQ5_1:
      return QuantizeBlocks<BlockQ5_1>(src, dst, n, kQK5_1, QuantizeRowQ5_1);
    case GgmlType::kQ8_0:
      return QuantizeBlocks<BlockQ8_0>(src, dst, n, kQK8_0, QuantizeRowQ8_0);
    case GgmlType::kQ8_1:
      return QuantizeBlocks<BlockQ8_1>(src, dst, n, kQK8_1, QuantizeRowQ8_1);
    case GgmlType::kQ4_K:
      return QuantizeBlocks<BlockQ4_K>(src, dst, n, kQK_K, QuantizeRowQ4_K);
    case GgmlType::kQ5_K:
      return QuantizeBlocks<BlockQ5_K>(src, dst, n, kQK_K, QuantizeRowQ5_K);
    case GgmlType::kQ6_K:
      return QuantizeBlocks<BlockQ6_K>(src, dst, n, kQK_K, QuantizeRowQ6_K);
    case GgmlType::kQ8_K:
      return QuantizeBlocks<BlockQ8_K>(src, dst, n, kQK_K, QuantizeRowQ8_K);
    default:
      Fail(
          "QuantizeRow: no reference quantizer for {} (supported: F32, F16, BF16, Q4_0, Q4_1, "
          "Q5_0, Q5_1, Q8_0, Q8_1, Q4_K, Q5_K, Q6_K, Q8_K)",
          TypeName(type));
  }
}

}  // namespace crossword
