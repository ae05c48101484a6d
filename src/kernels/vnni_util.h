// Helpers shared by the VNNI kernel files (internal): target attributes, row pointers, the
// 16-row transpose used by the repacking GEMMs, Q4_K scale unpacking. Include only from files
// that are compiled for x86-64 and call these from functions with the same attributes.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/vnni_kernels.h"

// Highway's AVX3_DL target (the only caller) requires VNNI and VBMI (hwy/detect_targets.h:
// "Ice Lake: VNNI, VPCLMULQDQ, VPOPCNTDQ, VBMI, VBMI2, ..."), so both are safe here.
#define CW_VNNI                                                             \
  __attribute__((                                                           \
      target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni," \
             "avx512vbmi")))
#define CW_BF16 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#if defined(__clang__)
#define CW_UNROLL _Pragma("unroll")
#else
#define CW_UNROLL _Pragma("GCC unroll 16")
#endif

namespace crossword::kernels::vnni::internal {

// Decode kernels prefetch this far ahead of the weight row they read (_MM_HINT_T2): AMD's
// hardware prefetcher stops at 4 KiB pages. For Q8_0/Q4_0, nearer or L1 prefetches measured no
// better or slower (bench/kernels_vs_ggml, one and two threads, AMD EPYC Zen 4); Q6_K adds one.
constexpr int64_t kPrefetchBytes = 16384;
// Q6_K decode rows also prefetch this far ahead into L1 (2 threads: 8-10 % faster on the head,
// bench/kernels_vs_ggml 2 203520 1 14).
constexpr int64_t kQ6KNearPrefetchBytes = 1024;

// Prefetches [base, base + bytes) into L2 a few lines per kernel step, spread over n_steps steps:
// the multi-row kernels fetch the next chunk of a load-time tile copy while they multiply the
// current one. (The previous version, one loop of _mm_prefetch over the whole next chunk before
// multiplying, was compiled out, see Step: without requests the Q6_K head's 8-row product from
// its 0.7 GB copy took the sum of its compute and read times, 29-31 ms, against 19-25 ms with
// these, bench/kernels_bench, 2 threads, AMD EPYC. A whole-chunk burst that is really issued
// was not measured.)
// [base, base + bytes) must lie in one allocation (the addresses are formed, never loaded);
// n_steps > 0. Default-constructed: does nothing.
class SpreadPrefetch {
 public:
  SpreadPrefetch() = default;
  SpreadPrefetch(const void* base, size_t bytes, int n_steps)
      : base_(static_cast<const char*>(base)),
        lines_((bytes + 63) / 64),
        per_step_((lines_ + static_cast<size_t>(n_steps) - 1) / static_cast<size_t>(n_steps)) {}
  void Step(int step) const {
    const size_t l0 = static_cast<size_t>(step) * per_step_;
    const size_t l1 = std::min(lines_, l0 + per_step_);
    // A volatile asm statement, not _mm_prefetch: GCC 12 deletes a loop of __builtin_prefetch
    // calls through a pointer loaded from an object as dead code (measured: the kernels had no
    // prefetcht1 left).
    for (size_t l = l0; l < l1; ++l) asm volatile("prefetcht1 %0" : : "m"(base_[64 * l]));
  }

 private:
  const char* base_ = nullptr;
  size_t lines_ = 0, per_step_ = 0;
};

inline int32_t Load32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Resolves activation/output row pointers of rows [i0, i0 + R) of a job.
struct RowPtrs {
  const uint8_t* x;
  float* y;
};
inline RowPtrs RowAt(const JobRows& rows, int64_t i) {
  const int64_t xr = rows.x_rows ? rows.x_rows[i] : i;
  const int64_t yr = rows.y_rows ? rows.y_rows[i] : i;
  return {rows.x->row(xr), rows.y + yr * rows.ldy};
}

// Horizontal-sum steps on int32 vectors a, b; per 128-bit lane, with a = [a0 a1 a2 a3]:
// Combine1 -> [a0+a2, b0+b2, a1+a3, b1+b3]; Combine2 -> [a0+a2, a1+a3, b0+b2, b1+b3].
// Combine2(Combine1(a, b), Combine1(c, d)) holds each lane's totals of a, b, c, d in order.
CW_VNNI inline __m512i Combine1(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
CW_VNNI inline __m512i Combine2(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

// A[j] lane l = 16 bytes of row j + 4l  ->  G[g] dword i = dword g of row i.
CW_VNNI inline void Transpose4(const __m512i A[4], __m512i G[4]) {
  const __m512i t0 = _mm512_unpacklo_epi32(A[0], A[1]);
  const __m512i t1 = _mm512_unpackhi_epi32(A[0], A[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(A[2], A[3]);
  const __m512i t3 = _mm512_unpackhi_epi32(A[2], A[3]);
  G[0] = _mm512_unpacklo_epi64(t0, t2);
  G[1] = _mm512_unpackhi_epi64(t0, t2);
  G[2] = _mm512_unpacklo_epi64(t1, t3);
  G[3] = _mm512_unpackhi_epi64(t1, t3);
}

CW_VNNI inline __m512i Load4x128(const uint8_t* const* rows, int j, size_t off) {
  __m512i v =
      _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j] + off)));
  v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j + 4] + off)),
                         1);
  v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j + 8] + off)),
                         2);
  v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j + 12] + off)),
                         3);
  return v;
}

// 16x16 float transpose: in + 16 i (row i, 16 floats, 64-byte aligned) -> out[k] lane i = in[16 i +
// k].
CW_VNNI inline void Transpose16(const float* in, __m512 out[16]) {
  __m512 t[16], u[16];
  for (int a = 0; a < 8; ++a) {
    const __m512 r0 = _mm512_load_ps(in + 32 * a), r1 = _mm512_load_ps(in + 32 * a + 16);
    t[2 * a] = _mm512_unpacklo_ps(r0, r1);      // 128-bit lane L: cols 4L, 4L+1 of rows 2a, 2a+1
    t[2 * a + 1] = _mm512_unpackhi_ps(r0, r1);  // cols 4L+2, 4L+3
  }
  for (int b = 0; b < 4; ++b) {  // u[4b + c] lane L: column 4L + c of rows 4b .. 4b+3
    u[4 * b + 0] = _mm512_shuffle_ps(t[4 * b], t[4 * b + 2], 0x44);
    u[4 * b + 1] = _mm512_shuffle_ps(t[4 * b], t[4 * b + 2], 0xEE);
    u[4 * b + 2] = _mm512_shuffle_ps(t[4 * b + 1], t[4 * b + 3], 0x44);
    u[4 * b + 3] = _mm512_shuffle_ps(t[4 * b + 1], t[4 * b + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(3, 1, 3, 1));
    out[c] = _mm512_shuffle_f32x4(v0, w0, _MM_SHUFFLE(2, 0, 2, 0));
    out[8 + c] = _mm512_shuffle_f32x4(v0, w0, _MM_SHUFFLE(3, 1, 3, 1));
    out[4 + c] = _mm512_shuffle_f32x4(v1, w1, _MM_SHUFFLE(2, 0, 2, 0));
    out[12 + c] = _mm512_shuffle_f32x4(v1, w1, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// Unpacks the 6-bit scales (bytes 0..7) and mins (bytes 8..15) of a Q4_K block.
inline void UnpackQ4KScales(const uint8_t* packed, uint32_t out[4]) {
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
  out[0] = u[0] & m6;                                       // scales 0..3
  out[1] = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);         // scales 4..7
  out[2] = u[1] & m6;                                       // mins 0..3
  out[3] = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4);  // mins 4..7
}

CW_VNNI inline float HalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

// The same unpacking in registers (no store-to-load round trip): bytes 0..7 scales, 8..15 mins.
// Reads 16 bytes at `packed` (the 12 scale bytes and the first 4 quant bytes of the block).
CW_VNNI inline __m128i UnpackQ4KScalesV(const uint8_t* packed) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  const __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));  // u0 u2 u1 u2
  const __m128i b = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));  // u0 u0 u1 u1
  const __m128i low = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                                    _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i high =
      _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(b, 6), _mm_set1_epi32(0x03030303)), 4);
  return _mm_or_si128(low, _mm_and_si128(high, _mm_setr_epi32(0, -1, 0, -1)));
}

}  // namespace crossword::kernels::vnni::internal
