// K-quant (Q4_K, Q5_K, Q6_K) products on AVX-512 VNNI. Few activation rows (decode): each weight
// row streamed once. Many rows (prefill, MoE experts): 16 weight rows x 2048 columns repacked once
// (4-byte groups interleaved across rows, scales and mins as per-row vectors), register tiles of
// up to 4 activation rows (Q6_K: 8). Both add the super-blocks in the same order with the same
// float ops.
// GCC 12 false positive inside its AVX-512 intrinsics (see vnni_kernels.cc); before the header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "core/quant_blocks.h"
#include "kernels/vnni_kernels.h"
#include "kernels/vnni_util.h"

namespace crossword::kernels::vnni {
namespace {
using namespace internal;  // NOLINT(build/namespaces)

// ---- Few activation rows. Batch invariance with the packed GEMM: per super-block the exact
// integer totals, then the GEMM's float operations in its order: acc = fma(isum, d*dx, acc), and
// for Q4_K/Q5_K acc = fnmadd(msum, dmin*dx, acc).

// Fused (one rounding) as the GEMM's vfmadd / vfnmadd; scalar so no lane insert/extract.
CW_VNNI inline float Fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
CW_VNNI inline float Fnma(float a, float b, float c) { return __builtin_fmaf(-a, b, c); }
CW_VNNI inline int32_t ReduceAdd256(__m256i v) {
  const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i t = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 1)));
}

// Q4_K (kQ5 = false) or Q5_K row dot products with R activation rows. The two share the header
// (d, dmin, 12 scale bytes); Q5_K adds qh[32] (bit 2c / 2c+1 of qh[l]: the 5th bit of the low /
// high nibble of qs[32c + l]) before qs.
template <int R, bool kQ5>
CW_VNNI void Q45KDot(const uint8_t* row, int64_t nsb, const RowPtrs* rp, const Activations& x,
                     float* out) {
  constexpr size_t kBlock = kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  constexpr size_t kQs = kQ5 ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs);
  float acc[R];
  CW_UNROLL for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  const __m512i idx[4] = {_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                          _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2),
                          _mm512_set_epi32(5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4),
                          _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6)};
  const __m256i lo4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* blk = row + sb * kBlock;
    const auto& hdr = *reinterpret_cast<const BlockQ4_K*>(blk);  // same header in Q5_K
    const __m128i smv = UnpackQ4KScalesV(hdr.scales);
    const __m512i sc32 = _mm512_cvtepu8_epi32(smv);  // lanes 0..7 = scales (< 64)
    // mins duplicated per pair of bsums: madd(bsums, [m0 m0 m1 m1 ..]) = m_j * (sum of 32).
    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(smv, smv));
    __m256i qh;
    if constexpr (kQ5) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
    __m512i isum[R];
    CW_UNROLL for (int r = 0; r < R; ++r) isum[r] = _mm512_setzero_si512();
    CW_UNROLL for (int c = 0; c < 4; ++c) {
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQs + 32 * c));
      __m256i lo = _mm256_and_si256(qv, lo4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qv, 4), lo4);
      if constexpr (kQ5) {
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(qh, one), 4));
        hi = _mm256_or_si256(hi,
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4));
        qh = _mm256_srli_epi16(qh, 2);
      }
      const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      const __m512i scv = _mm512_permutexvar_epi32(idx[c], sc32);
      CW_UNROLL for (int r = 0; r < R; ++r) {
        const __m512i xv = _mm512_loadu_si512(rp[r].x + sb * 256 + 64 * c);
        const __m512i prod = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv);
        // |prod| <= 4 * 31 * 127 < 2^15 and scales are non-negative int16 in the low half.
        isum[r] = _mm512_add_epi32(isum[r], _mm512_madd_epi16(prod, scv));
      }
    }
    const float d = HalfToFloat(hdr.d), dmin = HalfToFloat(hdr.dmin);
    CW_UNROLL for (int r = 0; r < R; ++r) {
      const float dx = reinterpret_cast<const float*>(rp[r].x + x.scale_offset())[sb];
      const __m256i bs =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp[r].x + x.sums_offset() + sb * 32));
      const int32_t msum = ReduceAdd256(_mm256_madd_epi16(bs, m16));
      acc[r] = Fma(static_cast<float>(_mm512_reduce_add_epi32(isum[r])), d * dx, acc[r]);
      acc[r] = Fnma(static_cast<float>(msum), dmin * dx, acc[r]);
    }
  }
  CW_UNROLL for (int r = 0; r < R; ++r) out[r] = acc[r];
}

template <int R>
CW_VNNI void Q6KDot(const BlockQ6_K* blocks, int64_t nsb, const RowPtrs* rp, const Activations& x,
                    float* out) {
  float acc[R];
  CW_UNROLL for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  const __m512i idx[4] = {
      _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
      _mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4),
      _mm512_set_epi32(11, 11, 11, 11, 10, 10, 10, 10, 9, 9, 9, 9, 8, 8, 8, 8),
      _mm512_set_epi32(15, 15, 15, 15, 14, 14, 14, 14, 13, 13, 13, 13, 12, 12, 12, 12)};
  const __m512i lo4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  const __m512i low16 = _mm512_set1_epi32(0xFFFF);
  // Per 16-bit lane shift counts: quarter 0/1 take qh bits 0-1/2-3 (<< 4/2), 2/3 take 4-5/6-7.
  const __m512i shl_a = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shr_b = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const BlockQ6_K& blk = blocks[sb];
    // Far ahead into L3 and near into L1 (kPrefetchBytes, kQ6KNearPrefetchBytes).
    const auto* here = reinterpret_cast<const char*>(&blk);
    CW_UNROLL for (int line = 0; line < 4; ++line) {
      _mm_prefetch(here + kPrefetchBytes + 64 * line, _MM_HINT_T2);
      _mm_prefetch(here + kQ6KNearPrefetchBytes + 64 * line, _MM_HINT_T0);
    }
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
    // madd_epi16 multiplies the low int16 of each lane: zero the high half (scales are signed).
    const __m512i sc32 = _mm512_and_si512(_mm512_cvtepi8_epi32(sc8), low16);
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    __m512i isum[R];
    CW_UNROLL for (int r = 0; r < R; ++r) isum[r] = _mm512_setzero_si512();
    CW_UNROLL for (int h = 0; h < 2; ++h) {
      const __m512i qlv = _mm512_loadu_si512(blk.ql + 64 * h);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
      const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
      // (low bits & 0x0F) | high bits in one ternary-logic op (0xEC: (a & c) | b).
      const __m512i wa = _mm512_ternarylogic_epi32(
          qlv, _mm512_and_si512(_mm512_sllv_epi16(qh2, shl_a), m30), lo4, 0xEC);
      const __m512i wb = _mm512_ternarylogic_epi32(
          _mm512_srli_epi16(qlv, 4), _mm512_and_si512(_mm512_srlv_epi16(qh2, shr_b), m30), lo4,
          0xEC);
      const __m512i sca = _mm512_permutexvar_epi32(idx[2 * h], sc32);
      const __m512i scb = _mm512_permutexvar_epi32(idx[2 * h + 1], sc32);
      CW_UNROLL for (int r = 0; r < R; ++r) {
        const int8_t* xq = reinterpret_cast<const int8_t*>(rp[r].x) + sb * 256 + 128 * h;
        const __m512i pa = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wa, _mm512_loadu_si512(xq));
        const __m512i pb =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), wb, _mm512_loadu_si512(xq + 64));
        // |pa|, |pb| <= 4 * 63 * 128 fit an int16 (high halves are the sign; sca's are zero).
        isum[r] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(isum[r], pa, sca), pb, scb);
      }
    }
    const float d = HalfToFloat(blk.d);
    CW_UNROLL for (int r = 0; r < R; ++r) {
      const float dx = reinterpret_cast<const float*>(rp[r].x + x.scale_offset())[sb];
      const __m256i bs =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp[r].x + x.sums_offset() + sb * 32));
      // The stored quants are q + 32: subtract 32 * sum_s scale_s * bsum_s.
      const int32_t corr = ReduceAdd256(_mm256_madd_epi16(bs, sc16));
      const int32_t total = _mm512_reduce_add_epi32(isum[r]) - corr * 32;
      acc[r] = Fma(static_cast<float>(total), d * dx, acc[r]);
    }
  }
  CW_UNROLL for (int r = 0; r < R; ++r) out[r] = acc[r];
}

template <int R>
CW_VNNI void KQuantRows(const Matrix& w, const JobRows& rows, int64_t o0, int64_t o1) {
  RowPtrs rp[R];
  CW_UNROLL for (int r = 0; r < R; ++r) rp[r] = RowAt(rows, r);
  const int64_t nsb = w.n_in / 256;
  float out[R];
  for (int64_t o = o0; o < o1; ++o) {
    const auto* wrow = static_cast<const uint8_t*>(w.data) + o * w.row_bytes;
    if (w.type == GgmlType::kQ4_K) {
      Q45KDot<R, false>(wrow, nsb, rp, *rows.x, out);
    } else if (w.type == GgmlType::kQ5_K) {
      Q45KDot<R, true>(wrow, nsb, rp, *rows.x, out);
    } else {
      Q6KDot<R>(reinterpret_cast<const BlockQ6_K*>(wrow), nsb, rp, *rows.x, out);
    }
    CW_UNROLL for (int r = 0; r < R; ++r) rp[r].y[o] = out[r];
  }
}

// ---- Many activation rows: repacked tiles.

constexpr int kRows = 16;        // weight rows per tile: one zmm lane each
constexpr int kChunkSb = 8;      // super-blocks (256 columns) per repacked chunk: 2048 columns
constexpr int kMaxTileR = 4;     // activation rows per register tile (Q4_K / Q5_K)
constexpr int kMaxTileRQ6K = 8;  // Q6_K (no min term): a longer run of dpbusd per scale multiply

// One repacked tile. q[s][g] lane r: the 4 quants (u8, 0..15) of group g (columns 4g..4g+3)
// of super-block s in weight row r. sc[s][j] lane r: 6-bit scale of sub-block j (32 columns).
// mp[s][p] lane r: mins of sub-blocks 2p and 2p+1 as two int16. d / dmin: fp16 scales.
struct alignas(64) PackedQ4K {
  uint8_t q[kChunkSb][64][64];
  int32_t sc[kChunkSb][8][kRows];
  int32_t mp[kChunkSb][4][kRows];
  float d[kChunkSb][kRows];
  float dmin[kChunkSb][kRows];
};

// Repacks super-blocks [sb0, sb0 + nsb) of 16 Q4_K (kQ5 = false) or Q5_K weight rows (rows
// past nv repeat the last valid row; their results are masked off). Q5_K quants get their 5th
// bit here, so the kernel below serves both.
template <bool kQ5>
CW_VNNI void PackQ45K(const uint8_t* w0, size_t rb, int nv, int64_t sb0, int nsb, PackedQ4K* p) {
  constexpr size_t kBlock = kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  constexpr size_t kQs = kQ5 ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs);
  const uint8_t* rows[kRows];
  for (int i = 0; i < kRows; ++i) rows[i] = w0 + static_cast<size_t>(i < nv ? i : nv - 1) * rb;
  const __m512i lo4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
  for (int s = 0; s < nsb; ++s) {
    const size_t off = static_cast<size_t>(sb0 + s) * kBlock;
    for (int r = 0; r < kRows; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ4_K*>(rows[r] + off);  // same header in Q5_K
      uint32_t u[4];
      UnpackQ4KScales(blk->scales, u);
      const auto* b = reinterpret_cast<const uint8_t*>(u);  // 8 scales, then 8 mins
      for (int j = 0; j < 8; ++j) p->sc[s][j][r] = b[j];
      for (int q = 0; q < 4; ++q) p->mp[s][q][r] = b[8 + 2 * q] | (b[9 + 2 * q] << 16);
      p->d[s][r] = _cvtsh_ss(blk->d);
      p->dmin[s][r] = _cvtsh_ss(blk->dmin);
    }
    // Q5_K: qh dwords t of each half, transposed like the quants (lane = weight row).
    __m512i H[2][4];
    if constexpr (kQ5) {
      for (int half = 0; half < 2; ++half) {
        __m512i A[4];
        const size_t hoff = off + offsetof(BlockQ5_K, qh) + 16 * half;
        CW_UNROLL for (int j = 0; j < 4; ++j) A[j] = Load4x128(rows, j, hoff);
        Transpose4(A, H[half]);
      }
    }
    // Chunk c (64 columns) comes from qs[32c .. 32c+32): low nibbles are columns 0..31, high
    // nibbles 32..63, so dword t of the chunk's bytes feeds groups 16c + t and 16c + 8 + t.
    for (int c = 0; c < 4; ++c) {
      for (int half = 0; half < 2; ++half) {
        __m512i A[4], G[4];
        const size_t qoff = off + kQs + 32 * c + 16 * half;
        CW_UNROLL for (int j = 0; j < 4; ++j) A[j] = Load4x128(rows, j, qoff);
        Transpose4(A, G);
        CW_UNROLL for (int t = 0; t < 4; ++t) {
          const int g = 16 * c + 4 * half + t;
          __m512i lo = _mm512_and_si512(G[t], lo4);
          __m512i hi = _mm512_and_si512(_mm512_srli_epi16(G[t], 4), lo4);
          if constexpr (kQ5) {
            const __m512i h = _mm512_srl_epi16(H[half][t], _mm_cvtsi32_si128(2 * c));
            lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(h, one), 4));
            hi = _mm512_or_si512(
                hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 1), one), 4));
          }
          _mm512_store_si512(p->q[s][g], lo);
          _mm512_store_si512(p->q[s][g + 8], hi);
        }
      }
    }
  }
}

// acc[r] (16 weight rows) += d*dx * sum_j sc_j * (q . x)_j  -  dmin*dx * sum_j m_j * bsum_j.
template <int R>
CW_VNNI inline void Q4KKernel(const PackedQ4K* p, int nsb, const int8_t* const* xq,
                              const float* const* xd, const int16_t* const* xs, __m512* acc,
                              const SpreadPrefetch& pf) {
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int s = 0; s < nsb; ++s) {
    __m512i isum[R], msum[R];
    CW_UNROLL for (int r = 0; r < R; ++r) {
      isum[r] = _mm512_setzero_si512();
      // Sums of the 8 sub-blocks of 32 as int16 pairs, then mins . sums with vpdpwssd.
      const __m256i bs16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[r] + 16 * s));
      const __m256i bs32 = _mm256_madd_epi16(bs16, ones16);  // 8 sums, |sum| <= 4064
      const __m128i pairs =
          _mm_packs_epi32(_mm256_castsi256_si128(bs32), _mm256_extracti128_si256(bs32, 1));
      __m512i m = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_load_si512(p->mp[s][0]),
                                      _mm512_set1_epi32(_mm_extract_epi32(pairs, 0)));
      m = _mm512_dpwssd_epi32(m, _mm512_load_si512(p->mp[s][1]),
                              _mm512_set1_epi32(_mm_extract_epi32(pairs, 1)));
      m = _mm512_dpwssd_epi32(m, _mm512_load_si512(p->mp[s][2]),
                              _mm512_set1_epi32(_mm_extract_epi32(pairs, 2)));
      m = _mm512_dpwssd_epi32(m, _mm512_load_si512(p->mp[s][3]),
                              _mm512_set1_epi32(_mm_extract_epi32(pairs, 3)));
      msum[r] = m;
    }
    CW_UNROLL for (int j = 0; j < 8; ++j) {
      pf.Step(8 * s + j);
      __m512i part[R];
      CW_UNROLL for (int r = 0; r < R; ++r) part[r] = _mm512_setzero_si512();
      CW_UNROLL for (int g = 0; g < 8; ++g) {
        const __m512i wv = _mm512_load_si512(p->q[s][8 * j + g]);
        CW_UNROLL for (int r = 0; r < R; ++r) {
          part[r] = _mm512_dpbusd_epi32(
              part[r], wv, _mm512_set1_epi32(Load32(xq[r] + 256 * s + 32 * j + 4 * g)));
        }
      }
      const __m512i scv = _mm512_load_si512(p->sc[s][j]);
      CW_UNROLL for (int r = 0; r < R; ++r) {
        isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(part[r], scv));
      }
    }
    const __m512 dv = _mm512_load_ps(p->d[s]), mv = _mm512_load_ps(p->dmin[s]);
    CW_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 dx = _mm512_set1_ps(xd[r][s]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_mul_ps(dv, dx), acc[r]);
      acc[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[r]), _mm512_mul_ps(mv, dx), acc[r]);
    }
  }
}

// Q6_K tile (35,840 bytes): q[s][g] lane r: the 4 quants of group g as int8 q - 32 (-32..31), the
// signed operand of vpdpbusd against the activations' biased codes x + 128 (Activations::
// biased_offset); sc[s][u] lane r: int8 scale of sub-block u (16 columns); corr[s] lane r:
// -128 * sum_u sc_u * sum_{c in u} (q_c - 32), which cancels the +128 of the codes, so the integer
// sum needs no per-activation-row term (the previous layout's -32 * sum_u sc_u * bsum_u cost 8
// vpdpwssd per row and super-block, ~10 % of the multiply port); d: fp16 scale as float.
struct alignas(64) PackedQ6K {
  int8_t q[kChunkSb][64][64];
  int8_t sc[kChunkSb][16][kRows];  // widened in the kernel (as int32 the copy was 15 % larger)
  int32_t corr[kChunkSb][kRows];
  float d[kChunkSb][kRows];
};
static_assert(sizeof(PackedQ6K) == 35840);

CW_VNNI void PackQ6K(const uint8_t* w0, size_t rb, int nv, int64_t sb0, int nsb, PackedQ6K* p) {
  const uint8_t* rows[kRows];
  for (int i = 0; i < kRows; ++i) rows[i] = w0 + static_cast<size_t>(i < nv ? i : nv - 1) * rb;
  const __m512i lo4 = _mm512_set1_epi8(0x0F), lo2 = _mm512_set1_epi8(0x03);
  const __m512i off32 = _mm512_set1_epi8(32), ones = _mm512_set1_epi8(1);
  for (int s = 0; s < nsb; ++s) {
    const size_t off = static_cast<size_t>(sb0 + s) * sizeof(BlockQ6_K);
    for (int r = 0; r < kRows; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ6_K*>(rows[r] + off);
      for (int u = 0; u < 16; ++u) p->sc[s][u][r] = blk->scales[u];
      p->d[s][r] = _cvtsh_ss(blk->d);
    }
    // Group g: half h = g/32, quarter = (g%32)/8, t = g%8. Its low 4 bits are the low (quarter
    // 0, 1) or high (2, 3) nibbles of ql dword 16h + 8(quarter%2) + t; its high 2 bits are bits
    // 2*quarter of qh dword 8h + t.
    for (int h = 0; h < 2; ++h) {
      __m512i ql[16], qh[8];
      for (int k = 0; k < 4; ++k) {  // ql dwords 16h + 4k .. +3
        __m512i A[4];
        const size_t o = off + offsetof(BlockQ6_K, ql) + 64 * h + 16 * k;
        CW_UNROLL for (int j = 0; j < 4; ++j) A[j] = Load4x128(rows, j, o);
        Transpose4(A, ql + 4 * k);
      }
      for (int k = 0; k < 2; ++k) {  // qh dwords 8h + 4k .. +3
        __m512i A[4];
        const size_t o = off + offsetof(BlockQ6_K, qh) + 32 * h + 16 * k;
        CW_UNROLL for (int j = 0; j < 4; ++j) A[j] = Load4x128(rows, j, o);
        Transpose4(A, qh + 4 * k);
      }
      CW_UNROLL for (int quarter = 0; quarter < 4; ++quarter) {
        CW_UNROLL for (int t = 0; t < 8; ++t) {
          const __m512i l = ql[8 * (quarter % 2) + t];
          const __m512i low = quarter < 2 ? _mm512_and_si512(l, lo4)
                                          : _mm512_and_si512(_mm512_srli_epi16(l, 4), lo4);
          const __m512i high = _mm512_and_si512(_mm512_srli_epi16(qh[t], 2 * quarter), lo2);
          _mm512_store_si512(
              p->q[s][32 * h + 8 * quarter + t],
              _mm512_sub_epi8(_mm512_or_si512(low, _mm512_slli_epi16(high, 4)), off32));
        }
      }
    }
    // corr: sub-block u is groups 4u .. 4u+3; a dpbusd with ones sums each lane's 4 quants.
    __m512i c = _mm512_setzero_si512();
    for (int u = 0; u < 16; ++u) {
      __m512i sum = _mm512_setzero_si512();
      for (int g = 0; g < 4; ++g) {
        sum = _mm512_dpbusd_epi32(sum, ones, _mm512_load_si512(p->q[s][4 * u + g]));
      }
      const __m512i scv =
          _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p->sc[s][u])));
      c = _mm512_add_epi32(c, _mm512_mullo_epi32(sum, scv));
    }
    _mm512_store_si512(p->corr[s], _mm512_mullo_epi32(c, _mm512_set1_epi32(-128)));
  }
}

// acc[r] += d*dx * sum_u sc_u * ((q - 32) . x)_u, the integer sum taken as
// corr + sum_u sc_u * ((q - 32) . (x + 128))_u (exact, so the bits are the few-row path's).
template <int R>
CW_VNNI inline void Q6KKernel(const PackedQ6K* p, int nsb, const uint8_t* const* xu,
                              const float* const* xd, __m512* acc, const SpreadPrefetch& pf) {
  for (int s = 0; s < nsb; ++s) {
    __m512i isum[R];
    const __m512i corr = _mm512_load_si512(p->corr[s]);
    CW_UNROLL for (int r = 0; r < R; ++r) isum[r] = corr;
    CW_UNROLL for (int u = 0; u < 16; ++u) {
      pf.Step(16 * s + u);
      __m512i part[R];
      CW_UNROLL for (int r = 0; r < R; ++r) part[r] = _mm512_setzero_si512();
      CW_UNROLL for (int g = 0; g < 4; ++g) {
        const __m512i wv = _mm512_load_si512(p->q[s][4 * u + g]);
        CW_UNROLL for (int r = 0; r < R; ++r) {
          part[r] = _mm512_dpbusd_epi32(
              part[r], _mm512_set1_epi32(Load32(xu[r] + 256 * s + 16 * u + 4 * g)), wv);
        }
      }
      const __m512i scv =
          _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p->sc[s][u])));
      CW_UNROLL for (int r = 0; r < R; ++r) {
        isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(part[r], scv));
      }
    }
    const __m512 dv = _mm512_load_ps(p->d[s]);
    CW_UNROLL for (int r = 0; r < R; ++r) {
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]),
                               _mm512_mul_ps(dv, _mm512_set1_ps(xd[r][s])), acc[r]);
    }
  }
}

// Kernel steps per super-block (SpreadPrefetch::Step calls): Q4_K/Q5_K 8 sub-blocks, Q6_K 16.
template <class Packed>
constexpr int kStepsPerSb = std::is_same_v<Packed, PackedQ4K> ? 8 : 16;

template <int R, class Packed>
CW_VNNI void KRows(const Packed* p, int nsb, int64_t sb0, const JobRows& rows, int64_t i0,
                   int64_t ot, __mmask16 mask, bool first, const SpreadPrefetch& pf) {
  constexpr bool kQ6 = std::is_same_v<Packed, PackedQ6K>;
  // Q4_K/Q5_K read the codes and the sums of 16 (their mins), Q6_K the biased codes.
  const int8_t* xq[R];
  const int16_t* xs[R];
  const uint8_t* xu[R];
  const float* xd[R];
  float* y[R];
  __m512 acc[R];
  const Activations& x = *rows.x;
  CW_UNROLL for (int r = 0; r < R; ++r) {
    const RowPtrs rp = RowAt(rows, i0 + r);
    if constexpr (kQ6) {
      xu[r] = rp.x + x.biased_offset() + sb0 * 256;
    } else {
      xq[r] = reinterpret_cast<const int8_t*>(rp.x) + sb0 * 256;
      xs[r] = reinterpret_cast<const int16_t*>(rp.x + x.sums_offset()) + sb0 * 16;
    }
    xd[r] = reinterpret_cast<const float*>(rp.x + x.scale_offset()) + sb0;
    y[r] = rp.y + ot;
    acc[r] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, y[r]);
  }
  if constexpr (kQ6) {
    Q6KKernel<R>(p, nsb, xu, xd, acc, pf);
  } else {
    Q4KKernel<R>(p, nsb, xq, xd, xs, acc, pf);
  }
  CW_UNROLL for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y[r], mask, acc[r]);
}

// KRows<n> for the n < kTileR rows left after the full register tiles (n <= R).
template <int R, class Packed>
CW_VNNI void KRowsRest(int n, const Packed* p, int nsb, int64_t sb0, const JobRows& rows,
                       int64_t i0, int64_t ot, __mmask16 mask, bool first,
                       const SpreadPrefetch& pf) {
  if (n == R) return KRows<R>(p, nsb, sb0, rows, i0, ot, mask, first, pf);
  if constexpr (R > 1) KRowsRest<R - 1>(n, p, nsb, sb0, rows, i0, ot, mask, first, pf);
}

// Packs one chunk (super-blocks [sb0, sb0 + nsb) of weight rows [ot, ot + nv)) of `w`.
template <class Packed>
CW_VNNI void PackChunk(const Matrix& w, int64_t ot, int nv, int64_t sb0, int nsb, Packed* p) {
  const uint8_t* w0 = static_cast<const uint8_t*>(w.data) + ot * w.row_bytes;
  if constexpr (std::is_same_v<Packed, PackedQ4K>) {
    if (w.type == GgmlType::kQ5_K) {
      PackQ45K<true>(w0, w.row_bytes, nv, sb0, nsb, p);
    } else {
      PackQ45K<false>(w0, w.row_bytes, nv, sb0, nsb, p);
    }
  } else {
    PackQ6K(w0, w.row_bytes, nv, sb0, nsb, p);
  }
}

// Chunks of kChunkSb super-blocks per 16-row tile (the last one may be partial).
inline int64_t ChunksPerTile(const Matrix& w) { return (w.n_in / 256 + kChunkSb - 1) / kChunkSb; }

template <class Packed>
CW_VNNI void PackedKTile(const Matrix& w, const JobRows& rows, int64_t o0, int64_t o1) {
  alignas(64) Packed scratch;
  // A copy repacked at load (RepackK) holds whole tiles from row 0, chunk after chunk; the
  // matmul tasks start on tile edges.
  const auto* prepacked = o0 % kRows == 0 ? static_cast<const Packed*>(w.packed) : nullptr;
  const int64_t nsb_all = w.n_in / 256;
  const int64_t n_chunks = ChunksPerTile(w);
  for (int64_t ot = o0; ot < o1; ot += kRows) {
    const int nv = static_cast<int>(std::min<int64_t>(kRows, o1 - ot));
    const __mmask16 mask = static_cast<__mmask16>((1u << nv) - 1);
    for (int64_t sb0 = 0; sb0 < nsb_all; sb0 += kChunkSb) {
      const int nsb = static_cast<int>(std::min<int64_t>(kChunkSb, nsb_all - sb0));
      const Packed* pp = &scratch;
      SpreadPrefetch pf;
      if (prepacked) {
        pp = prepacked + (ot / kRows) * n_chunks + sb0 / kChunkSb;
        // The copy comes from memory; the next chunk (contiguous) is fetched into L2 while this
        // one is multiplied, a few lines per step of the first pass over it.
        if (ot + kRows < o1 || sb0 + kChunkSb < nsb_all) {
          pf = SpreadPrefetch(pp + 1, sizeof(Packed), nsb * kStepsPerSb<Packed>);
        }
      } else {
        PackChunk(w, ot, nv, sb0, nsb, &scratch);
      }
      const Packed& p = *pp;
      const bool first = sb0 == 0;
      const SpreadPrefetch none;
      constexpr int kTileR = std::is_same_v<Packed, PackedQ6K> ? kMaxTileRQ6K : kMaxTileR;
      int64_t i = 0;
      for (; i + kTileR <= rows.n_rows; i += kTileR) {
        KRows<kTileR>(&p, nsb, sb0, rows, i, ot, mask, first, i == 0 ? pf : none);
      }
      if (i < rows.n_rows) {
        KRowsRest<kTileR - 1>(static_cast<int>(rows.n_rows - i), &p, nsb, sb0, rows, i, ot, mask,
                              first, i == 0 ? pf : none);
      }
    }
  }
}

}  // namespace

size_t KQuantPackedBytes(const Matrix& w) {
  // Every chunk of the layout holds kChunkSb super-blocks, so a width that is not a multiple of
  // 2048 would be padded: Clover's 512-column ffn_down_exps 4x (6.8-8.7x the file's bytes).
  // Those keep unpacking per call.
  if (w.n_in % (kChunkSb * 256) != 0) return 0;
  const size_t tile = w.type == GgmlType::kQ6_K ? sizeof(PackedQ6K) : sizeof(PackedQ4K);
  return static_cast<size_t>((w.n_out + kRows - 1) / kRows) *
         static_cast<size_t>(ChunksPerTile(w)) * tile;
}

CW_VNNI void RepackK(const Matrix& w, void* out) {
  const int64_t nsb_all = w.n_in / 256;
  const int64_t n_chunks = ChunksPerTile(w);
  for (int64_t ot = 0; ot < w.n_out; ot += kRows) {
    const int nv = static_cast<int>(std::min<int64_t>(kRows, w.n_out - ot));
    for (int64_t c = 0; c < n_chunks; ++c) {
      const int64_t sb0 = c * kChunkSb;
      const int nsb = static_cast<int>(std::min<int64_t>(kChunkSb, nsb_all - sb0));
      const int64_t at = (ot / kRows) * n_chunks + c;
      if (w.type == GgmlType::kQ6_K) {
        PackChunk(w, ot, nv, sb0, nsb, static_cast<PackedQ6K*>(out) + at);
      } else {
        PackChunk(w, ot, nv, sb0, nsb, static_cast<PackedQ4K*>(out) + at);
      }
    }
  }
}

CW_VNNI void KQuantPackedTile(const Matrix& w, const JobRows& rows, int64_t o0, int64_t o1) {
  if (w.type == GgmlType::kQ6_K) return PackedKTile<PackedQ6K>(w, rows, o0, o1);
  PackedKTile<PackedQ4K>(w, rows, o0, o1);  // Q4_K and Q5_K
}

CW_VNNI void KQuantTile(const Matrix& w, const JobRows& rows, int64_t o0, int64_t o1) {
  switch (rows.n_rows) {
    case 1:
      return KQuantRows<1>(w, rows, o0, o1);
    case 2:
      return KQuantRows<2>(w, rows, o0, o1);
    case 3:
      return KQuantRows<3>(w, rows, o0, o1);
    default:
      return KQuantPackedTile(w, rows, o0, o1);
  }
}

}  // namespace crossword::kernels::vnni
