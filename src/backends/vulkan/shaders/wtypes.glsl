// Weight decoding for the mat-vec style shaders (mmv, moe_gate_up, moe_down), one type per
// variant (TYPE_F32 ... TYPE_Q6_K), GGUF block layouts of core/quant_blocks.h.
// The weights are binding 1 ("wd"), viewed in the unit the type's blocks are aligned to:
// float (F32), uint (F16, BF16, Q4_K, Q5_K: 4-byte multiples), uint16_t (Q4_0 18 bytes, Q8_0
// 34 bytes, Q6_K 210 bytes). A row starts at unit index `base`; every type is read in chunks of
// 32 elements (chunk c = elements 32c .. 32c+31).
//
// INT8=0: w_part() dequantizes 8 elements of a chunk to floats (the float path).
// INT8=1: dot_i8_half() multiplies half a chunk with the activation row quantized by quantize_q8.comp
// (binding 2, "xq", uint words: int8 quants packed 4 per word [n/4], then per block of 32
// (Q8_0 format) or of 256 (Q8_K format) the float scale [n/32 or n/256], then for Q8_K the
// int32 sums of 16 quants [n/16]) using OpSDot on packed 4x8 vectors; integer sums are exact,
// as in the CPU twin (kernels/ref.cc DotRow).

#if defined(TYPE_F32)
layout(set = 0, binding = 1) readonly buffer WB { float wd[]; };
#define W_UNIT 4
#elif defined(TYPE_F16) || defined(TYPE_BF16) || defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
layout(set = 0, binding = 1) readonly buffer WB { uint wd[]; };
#define W_UNIT 4
#else
layout(set = 0, binding = 1) readonly buffer WB { uint16_t wd[]; };
#define W_UNIT 2
#endif

#if defined(TYPE_Q4_K) || defined(TYPE_Q5_K) || defined(TYPE_Q6_K)
#define Q8_K_ACT 1
#else
#define Q8_K_ACT 0
#endif

uint w_u16x2(uint i) { return uint(wd[i]) | (uint(wd[i + 1]) << 16); }

// The activation as the float path multiplies it: BF16 weights take x rounded to bfloat16
// (nearest even, as the CPU engine's kBF16 activations); every other type takes x as is.
float act(float x) {
#if defined(TYPE_BF16)
  const uint u = floatBitsToUint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;
  return uintBitsToFloat((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
#else
  return x;
#endif
}

// Q4_K / Q5_K: 6-bit scale and min of sub-block j from the 12 packed bytes (words s0..s0+2).
#if defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
uint k_byte(uint s0, uint k) { return (wd[s0 + k / 4] >> (8 * (k % 4))) & 0xffu; }
void k_scale_min(uint s0, uint j, out float sc, out float m) {
  if (j < 4) {
    sc = float(k_byte(s0, j) & 63u);
    m = float(k_byte(s0, j + 4) & 63u);
  } else {
    sc = float((k_byte(s0, j + 4) & 0xfu) | ((k_byte(s0, j - 4) >> 6) << 4));
    m = float((k_byte(s0, j + 4) >> 4) | ((k_byte(s0, j) >> 6) << 4));
  }
}
#endif

#if !INT8
// Dequantizes part p (elements 8p .. 8p+7) of chunk c of the row at unit `base` into v
// (formulas of core/quant.cc). Parts keep the unrolled code small: lavapipe compiles every
// pipeline with LLVM on first use, and its time grows with the unrolled body.
void w_part(uint base, uint c, uint p, out float v[8]) {
#if defined(TYPE_F32)
  [[unroll]] for (uint i = 0; i < 8; ++i) v[i] = wd[base + 32 * c + 8 * p + i];
#elif defined(TYPE_F16)
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    const vec2 h = unpackHalf2x16(wd[base + 16 * c + 4 * p + i]);
    v[2 * i] = h.x;
    v[2 * i + 1] = h.y;
  }
#elif defined(TYPE_BF16)
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    const uint u = wd[base + 16 * c + 4 * p + i];
    v[2 * i] = uintBitsToFloat(u << 16);
    v[2 * i + 1] = uintBitsToFloat(u & 0xffff0000u);
  }
#elif defined(TYPE_Q4_0)
  const uint b = base + 9 * c;  // {d, qs[16]}: 18 bytes; element e < 16 low nibble of byte e
  const float d = f16_to_f32(uint(wd[b]));
  const uint shift = 4 * (p / 2);
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    const uint q = uint(wd[b + 1 + 4 * (p % 2) + i]) >> shift;
    v[2 * i] = d * (float(q & 0xfu) - 8.0);
    v[2 * i + 1] = d * (float((q >> 8) & 0xfu) - 8.0);
  }
#elif defined(TYPE_Q8_0)
  const uint b = base + 17 * c;  // {d, qs[32]}: 34 bytes
  const float d = f16_to_f32(uint(wd[b]));
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    const int q = int(uint(wd[b + 1 + 4 * p + i]));
    v[2 * i] = d * float((q << 24) >> 24);
    v[2 * i + 1] = d * float((q << 16) >> 24);
  }
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
#if defined(TYPE_Q4_K)
  const uint s = base + 36 * (c / 8);  // 144 bytes: d, dmin, scales[12], qs[128]
  const uint qs = s + 4;
#else
  const uint s = base + 44 * (c / 8);  // 176 bytes: d, dmin, scales[12], qh[32], qs[128]
  const uint qs = s + 12;
#endif
  const uint j = c % 8;
  const vec2 dm = unpackHalf2x16(wd[s]);
  float sc, m;
  k_scale_min(s + 1, j, sc, m);
  const float d1 = dm.x * sc, m1 = dm.y * m;
  const uint shift = 4 * (j % 2);
  [[unroll]] for (uint i = 0; i < 2; ++i) {
    const uint q = wd[qs + (j / 2) * 8 + 2 * p + i];
#if defined(TYPE_Q5_K)
    const uint h = wd[s + 4 + 2 * p + i];
#endif
    [[unroll]] for (uint k = 0; k < 4; ++k) {
      uint v8 = (q >> (8 * k + shift)) & 0xfu;
#if defined(TYPE_Q5_K)
      v8 |= ((h >> (8 * k + j)) & 1u) << 4;
#endif
      v[4 * i + k] = d1 * float(v8) - m1;
    }
  }
#elif defined(TYPE_Q6_K)
  const uint s = base + 105 * (c / 8);  // 210 bytes: ql[128], qh[64], scales[16], d
  const uint cc = c % 8, h = cc / 4, quarter = cc % 4;
  const float d = f16_to_f32(uint(wd[s + 104]));
  const uint scw = uint(wd[s + 96 + cc]);  // scales of elements 0-15 and 16-31 of the chunk
  const float sc = d * float(p < 2 ? (int(scw << 24) >> 24) : (int(scw << 16) >> 24));
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    const uint ql = uint(wd[s + h * 32 + (quarter % 2) * 16 + 4 * p + i]);  // bytes l, l+1
    const uint qh = uint(wd[s + 64 + h * 16 + 4 * p + i]);
    [[unroll]] for (uint k = 0; k < 2; ++k) {
      const uint qb = (ql >> (8 * k)) & 0xffu;
      const uint lo = quarter < 2 ? (qb & 0xfu) : (qb >> 4);
      const uint hi = (qh >> (8 * k + 2 * quarter)) & 3u;
      v[2 * i + k] = sc * float(int(lo | (hi << 4)) - 32);
    }
  }
#endif
}
#endif  // !INT8

#if INT8
#extension GL_EXT_spirv_intrinsics : require
// OpSDot (SPV_KHR_integer_dot_product) on two int32 holding 4 packed int8 each; the literal 0
// is PackedVectorFormat4x8Bit.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018],
                  id = 4450) int sdot_packed(int a, int b, spirv_literal int fmt);
int dot4(uint a, uint b) { return sdot_packed(int(a), int(b), 0); }

layout(set = 0, binding = 2) readonly buffer XQ { uint xq[]; };

// Half hf (elements 16hf .. 16hf+15) of weight chunk c (row at unit `base`) times the
// activation row at word `xrow` (n_in elements): the exact integer sum of the half scaled as the
// CPU twin scales it. Halves align with every type's sub-block scales and Q8_K's sums of 16.
float dot_i8_half(uint base, uint c, uint hf, uint xrow, uint n_in) {
  const uint xa = xrow + 8 * c + 4 * hf;  // the half's 4 quant words
#if Q8_K_ACT
  const float dx = uintBitsToFloat(xq[xrow + n_in / 4 + c / 8]);
  const int bsum = int(xq[xrow + n_in / 4 + n_in / 256 + 2 * c + hf]);
#else
  const float dx = uintBitsToFloat(xq[xrow + n_in / 4 + c]);
#endif
  int asum = 0;  // sum of the activation quants (offset corrections)
  int isum = 0;
#if defined(TYPE_Q4_0)
  const uint b = base + 9 * c;
  const float d = f16_to_f32(uint(wd[b]));
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    const uint q = w_u16x2(b + 1 + 2 * i) >> (4 * hf);  // bytes 4i..4i+3: low or high nibbles
    isum += dot4(q & 0x0f0f0f0fu, xq[xa + i]);
    asum += dot4(0x01010101u, xq[xa + i]);
  }
  return (d * dx) * float(isum - 8 * asum);
#elif defined(TYPE_Q8_0)
  const uint b = base + 17 * c;
  const float d = f16_to_f32(uint(wd[b]));
  [[unroll]] for (uint i = 0; i < 4; ++i) isum += dot4(w_u16x2(b + 1 + 8 * hf + 2 * i), xq[xa + i]);
  return (d * dx) * float(isum);
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
#if defined(TYPE_Q4_K)
  const uint s = base + 36 * (c / 8);
  const uint qs = s + 4;
#else
  const uint s = base + 44 * (c / 8);
  const uint qs = s + 12;
#endif
  const uint j = c % 8;
  const vec2 dm = unpackHalf2x16(wd[s]);
  float sc, m;
  k_scale_min(s + 1, j, sc, m);
  const uint shift = 4 * (j % 2);
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    uint q = (wd[qs + (j / 2) * 8 + 4 * hf + i] >> shift) & 0x0f0f0f0fu;
#if defined(TYPE_Q5_K)
    q |= ((wd[s + 4 + 4 * hf + i] >> j) & 0x01010101u) << 4;
#endif
    isum += dot4(q, xq[xa + i]);
  }
  return (dm.x * dx) * float(int(sc) * isum) - (dm.y * dx) * float(int(m) * bsum);
#elif defined(TYPE_Q6_K)
  const uint s = base + 105 * (c / 8);
  const uint cc = c % 8, h = cc / 4, quarter = cc % 4;
  const float d = f16_to_f32(uint(wd[s + 104]));
  const uint scw = uint(wd[s + 96 + cc]);
  const int sc = hf == 0 ? (int(scw << 24) >> 24) : (int(scw << 16) >> 24);
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    const uint ql = w_u16x2(s + h * 32 + (quarter % 2) * 16 + 8 * hf + 2 * i);
    const uint qh = w_u16x2(s + 64 + h * 16 + 8 * hf + 2 * i);
    const uint lo = quarter < 2 ? (ql & 0x0f0f0f0fu) : ((ql >> 4) & 0x0f0f0f0fu);
    const uint q = lo | (((qh >> (2 * quarter)) & 0x03030303u) << 4);  // 0..63 per byte
    isum += dot4(q, xq[xa + i]);
    asum += dot4(0x01010101u, xq[xa + i]);
  }
  return (d * dx) * float(sc * (isum - 32 * asum));
#else
#error "int8 path: no such type"
#endif
}
#endif  // INT8
