// AVX-512 VNNI (vpdpbusd) and AVX512_BF16 (vdpbf16ps) tile kernels for MatMul. Every function
// carries its own target attribute; callers check the CPU first (the AVX3_DL Highway target
// implies VNNI; BF16 is checked with CpuHasAvx512Bf16()).
// GCC 12 reports the deliberately undefined upper halves inside its own AVX-512 cast/reduce
// intrinsics as uninitialized (a known false positive); the pragma must precede the header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "kernels/vnni_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/vnni_util.h"

namespace crossword::kernels::vnni {
namespace {
using namespace internal;  // NOLINT(build/namespaces): this file is the helpers' client

constexpr int kOTile = 16;             // weight rows per repacked tile (one zmm of int32 outputs)
constexpr int kChunkBlocks = 64;       // 2048 columns per repacked chunk: 32 KiB + 4 KiB, fits L1
constexpr int64_t kMaxDirectRows = 3;  // up to this many rows skip the repacking
#ifndef CW_PREFETCH_ROWS
#define CW_PREFETCH_ROWS 2
#endif
constexpr int64_t kPrefetchRows = CW_PREFETCH_ROWS;  // decode: software prefetch distance

// One repacked tile: q[b][g] holds bytes 4g..4g+3 of block b for each of the 16 rows (lane i =
// row i) as u8 = w + 128; d[b] holds the 16 rows' block scales.
struct alignas(64) Packed {
  uint8_t q[kChunkBlocks][8][64];
  float d[kChunkBlocks][kOTile];
};

// Repacks blocks [b0, b0 + nb) of weight rows w0 .. w0 + (nv-1)*rb (rows past nv repeat the last
// valid row; their results are masked off). Q4_0 nibbles become u8 q + 120 = (q - 8) + 128.
CW_VNNI void Pack(GgmlType type, const uint8_t* w0, size_t rb, int nv, int64_t b0, int nb,
                  Packed* p) {
  const uint8_t* rows[kOTile];
  alignas(64) int32_t idx[kOTile];
  for (int i = 0; i < kOTile; ++i) {
    const int r = i < nv ? i : nv - 1;
    rows[i] = w0 + static_cast<size_t>(r) * rb;
    idx[i] = static_cast<int32_t>(static_cast<size_t>(r) * rb);
  }
  const __m512i vidx = _mm512_load_si512(idx);
  const bool q8 = type == GgmlType::kQ8_0;
  const size_t bsz = q8 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i lo4 = _mm512_set1_epi8(0x0F);
  const __m512i off120 = _mm512_set1_epi8(120);
  for (int b = 0; b < nb; ++b) {
    const size_t off = static_cast<size_t>(b0 + b) * bsz;
    // The fp16 scale is the first field of both block types; gather 4 bytes, keep the low 2.
    const __m512i dw = _mm512_i32gather_epi32(vidx, w0 + off, 1);
    _mm512_store_ps(p->d[b], _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dw)));
    __m512i A[4], G[4];
    if (q8) {
      for (int half = 0; half < 2; ++half) {
        CW_UNROLL for (int j = 0; j < 4; ++j) A[j] = Load4x128(rows, j, off + 2 + 16 * half);
        Transpose4(A, G);
        CW_UNROLL for (int g = 0; g < 4; ++g) {
          _mm512_store_si512(p->q[b][4 * half + g], _mm512_xor_si512(G[g], flip));
        }
      }
    } else {
      CW_UNROLL for (int j = 0; j < 4; ++j) A[j] = Load4x128(rows, j, off + 2);
      Transpose4(A, G);
      CW_UNROLL for (int g = 0; g < 4; ++g) {
        const __m512i lo = _mm512_and_si512(G[g], lo4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(G[g], 4), lo4);
        _mm512_store_si512(p->q[b][g], _mm512_add_epi8(lo, off120));
        _mm512_store_si512(p->q[b][4 + g], _mm512_add_epi8(hi, off120));
      }
    }
  }
}

// acc[r] (16 outputs of row r) += sum over blocks of d_w * d_x * (sum (w+128) x - 128 sum x).
template <int R>
CW_VNNI inline void Q8Kernel(const Packed* p, int nb, const int8_t* const* xq,
                             const float* const* xd, const int32_t* const* xs, __m512* acc) {
  for (int b = 0; b < nb; ++b) {
    __m512i ai[R];
    CW_UNROLL for (int r = 0; r < R; ++r) ai[r] = _mm512_set1_epi32(xs[r][b]);
    CW_UNROLL for (int g = 0; g < 8; ++g) {
      const __m512i wv = _mm512_load_si512(p->q[b][g]);
      CW_UNROLL for (int r = 0; r < R; ++r) {
        ai[r] = _mm512_dpbusd_epi32(ai[r], wv, _mm512_set1_epi32(Load32(xq[r] + b * 32 + 4 * g)));
      }
    }
    const __m512 sw = _mm512_load_ps(p->d[b]);
    CW_UNROLL for (int r = 0; r < R; ++r) {
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[r]),
                               _mm512_mul_ps(sw, _mm512_set1_ps(xd[r][b])), acc[r]);
    }
  }
}

template <int R>
CW_VNNI void Q8Rows(const Packed* p, int nb, int64_t b0, const JobRows& rows, int64_t i0,
                    int64_t ot, __mmask16 mask, bool first) {
  const int8_t* xq[R];
  const float* xd[R];
  const int32_t* xs[R];
  float* y[R];
  __m512 acc[R];
  const Activations& x = *rows.x;
  CW_UNROLL for (int r = 0; r < R; ++r) {
    const RowPtrs rp = RowAt(rows, i0 + r);
    xq[r] = reinterpret_cast<const int8_t*>(rp.x) + b0 * 32;
    xd[r] = reinterpret_cast<const float*>(rp.x + x.scale_offset()) + b0;
    xs[r] = reinterpret_cast<const int32_t*>(rp.x + x.sums_offset()) + b0;
    y[r] = rp.y + ot;
    acc[r] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, y[r]);
  }
  Q8Kernel<R>(p, nb, xq, xd, xs, acc);
  CW_UNROLL for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y[r], mask, acc[r]);
}

// ---- Few activation rows (decode): stream each weight row once, no repacking.

// Horizontal sums of 8 dpbusd results: v_i lanes 0-7 belong to block 2i, lanes 8-15 to block
// 2i+1. Combine1 pairs vectors, Combine2 finishes each 128-bit lane, Combine3 adds lane pairs.
CW_VNNI inline __m512i Combine1(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
CW_VNNI inline __m512i Combine2(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}
// Returns the 16 block sums in natural order.
CW_VNNI inline __m512i Combine3(__m512i w0123, __m512i w4567) {
  const __m512i x = _mm512_shuffle_i32x4(w0123, w4567, _MM_SHUFFLE(2, 0, 2, 0));
  const __m512i y = _mm512_shuffle_i32x4(w0123, w4567, _MM_SHUFFLE(3, 1, 3, 1));
  // x + y holds blocks [0 2 4 6 | 1 3 5 7 | 8 10 12 14 | 9 11 13 15].
  const __m512i order = _mm512_set_epi32(15, 11, 14, 10, 13, 9, 12, 8, 7, 3, 6, 2, 5, 1, 4, 0);
  return _mm512_permutexvar_epi32(order, _mm512_add_epi32(x, y));
}

// The 64 u8 weights of blocks b, b+1 (Q8_0: w + 128; Q4_0: the nibbles q, i.e. w + 8).
template <bool kQ8>
CW_VNNI inline __m512i PairWeights(const uint8_t* blk) {
  if constexpr (kQ8) {
    const uint8_t* qs = blk + 2;
    // Bytes 32..63 of a load at qs + 2 are the quants of the next block (34 bytes later).
    const __m512i v = _mm512_mask_loadu_epi8(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs))),
        0xFFFFFFFF00000000ull, qs + 2);
    return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
  } else {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2 + 18));
    // [q0 q0 q1 q1], then the high nibbles in 128-bit lanes 1 and 3.
    const __m512i t =
        _mm512_inserti32x8(_mm512_broadcast_i32x4(q0), _mm256_broadcastsi128_si256(q1), 1);
    const __m512i s = _mm512_mask_srli_epi16(t, 0xFF00FF00u, t, 4);
    return _mm512_and_si512(s, _mm512_set1_epi8(0x0F));
  }
}

template <int R, bool kQ8>
CW_VNNI void DirectQ8Rows(const Matrix& w, const JobRows& rows, int64_t i0, int64_t o0,
                          int64_t o1) {
  constexpr int64_t kBs = kQ8 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  const int64_t nb = w.n_in / 32;
  const Activations& x = *rows.x;
  RowPtrs rp[R];
  const int8_t* xq[R];
  const float* xd[R];
  const int32_t* xs[R];
  CW_UNROLL for (int r = 0; r < R; ++r) {
    rp[r] = RowAt(rows, i0 + r);
    xq[r] = reinterpret_cast<const int8_t*>(rp[r].x);
    xd[r] = reinterpret_cast<const float*>(rp[r].x + x.scale_offset());
    xs[r] = reinterpret_cast<const int32_t*>(rp[r].x + x.sums_offset());
  }
  const __m512i gidx =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(static_cast<int32_t>(kBs)));
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* wrow = static_cast<const uint8_t*>(w.data) + o * w.row_bytes;
    __m512 acc[R];
    CW_UNROLL for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 16 <= nb; b += 16) {
      const uint8_t* blk = wrow + b * kBs;
      if constexpr (kPrefetchRows > 0) {
        // The same 16 blocks a few rows ahead (never dereferenced; past the end is harmless).
        const uint8_t* ahead = blk + kPrefetchRows * w.row_bytes;
        CW_UNROLL for (int64_t line = 0; line < 16 * kBs; line += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T0);
        }
      }
      __m512i u[R][4];
      CW_UNROLL for (int j = 0; j < 4; ++j) {
        const __m512i wa = PairWeights<kQ8>(blk + (4 * j) * kBs);
        const __m512i wb = PairWeights<kQ8>(blk + (4 * j + 2) * kBs);
        CW_UNROLL for (int r = 0; r < R; ++r) {
          const int8_t* xp = xq[r] + (b + 4 * j) * 32;
          const __m512i pa =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), wa, _mm512_loadu_si512(xp));
          const __m512i pb =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), wb, _mm512_loadu_si512(xp + 64));
          u[r][j] = Combine1(pa, pb);
        }
      }
      const __m512 dw =
          _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(gidx, blk, 1)));
      CW_UNROLL for (int r = 0; r < R; ++r) {
        __m512i sums = Combine3(Combine2(u[r][0], u[r][1]), Combine2(u[r][2], u[r][3]));
        const __m512i corr = _mm512_loadu_si512(xs[r] + b);  // -128 * sum(x) per block
        sums = _mm512_add_epi32(sums, kQ8 ? corr : _mm512_srai_epi32(corr, 4));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums),
                                 _mm512_mul_ps(dw, _mm512_loadu_ps(xd[r] + b)), acc[r]);
      }
    }
    float tail[R] = {};
    for (; b < nb; ++b) {  // n_in not a multiple of 512: one block at a time
      const uint8_t* blk = wrow + b * kBs;
      uint16_t dh;
      std::memcpy(&dh, blk, 2);
      const float dwb = _cvtsh_ss(dh);
      __m256i wv;
      if constexpr (kQ8) {
        wv = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)),
                              _mm256_set1_epi8(static_cast<char>(0x80)));
      } else {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
        const __m256i t =
            _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
        wv = _mm256_and_si256(t, _mm256_set1_epi8(0x0F));
      }
      CW_UNROLL for (int r = 0; r < R; ++r) {
        const __m256i p = _mm256_dpbusd_epi32(
            _mm256_setzero_si256(), wv,
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[r] + b * 32)));
        const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        const __m128i h2 = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
        int32_t isum = _mm_cvtsi128_si32(_mm_add_epi32(h2, _mm_shuffle_epi32(h2, 1)));
        isum += kQ8 ? xs[r][b] : (xs[r][b] >> 4);
        tail[r] += dwb * xd[r][b] * static_cast<float>(isum);
      }
    }
    CW_UNROLL for (int r = 0; r < R; ++r) rp[r].y[o] = _mm512_reduce_add_ps(acc[r]) + tail[r];
  }
}

template <bool kQ8>
CW_VNNI void DirectQ8Tile(const Matrix& w, const JobRows& rows, int64_t o0, int64_t o1) {
  switch (rows.n_rows) {
    case 3:
      return DirectQ8Rows<3, kQ8>(w, rows, 0, o0, o1);
    case 2:
      return DirectQ8Rows<2, kQ8>(w, rows, 0, o0, o1);
    default:
      for (int64_t i = 0; i < rows.n_rows; ++i) DirectQ8Rows<1, kQ8>(w, rows, i, o0, o1);
  }
}

}  // namespace

CW_VNNI void Q8Tile(const Matrix& w, const JobRows& rows, int64_t o0, int64_t o1) {
  if (rows.n_rows <= kMaxDirectRows) {
    return w.type == GgmlType::kQ8_0 ? DirectQ8Tile<true>(w, rows, o0, o1)
                                     : DirectQ8Tile<false>(w, rows, o0, o1);
  }
  alignas(64) Packed p;
  const int64_t nblocks = w.n_in / 32;
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t ot = o0; ot < o1; ot += kOTile) {
    const int nv = static_cast<int>(std::min<int64_t>(kOTile, o1 - ot));
    const __mmask16 mask = static_cast<__mmask16>((1u << nv) - 1);
    for (int64_t b0 = 0; b0 < nblocks; b0 += kChunkBlocks) {
      const int nb = static_cast<int>(std::min<int64_t>(kChunkBlocks, nblocks - b0));
      Pack(w.type, base + ot * w.row_bytes, w.row_bytes, nv, b0, nb, &p);
      const bool first = b0 == 0;
      int64_t i = 0;
      for (; i + 8 <= rows.n_rows; i += 8) Q8Rows<8>(&p, nb, b0, rows, i, ot, mask, first);
      switch (rows.n_rows - i) {
        case 7:
          Q8Rows<7>(&p, nb, b0, rows, i, ot, mask, first);
          break;
        case 6:
          Q8Rows<6>(&p, nb, b0, rows, i, ot, mask, first);
          break;
        case 5:
          Q8Rows<5>(&p, nb, b0, rows, i, ot, mask, first);
          break;
        case 4:
          Q8Rows<4>(&p, nb, b0, rows, i, ot, mask, first);
          break;
        case 3:
          Q8Rows<3>(&p, nb, b0, rows, i, ot, mask, first);
          break;
        case 2:
          Q8Rows<2>(&p, nb, b0, rows, i, ot, mask, first);
          break;
        case 1:
          Q8Rows<1>(&p, nb, b0, rows, i, ot, mask, first);
          break;
        default:
          break;
      }
    }
  }
}

namespace {

CW_VNNI inline float ReduceAdd256(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

template <int R>
CW_VNNI void Q4KDot(const BlockQ4_K* blocks, int64_t nsb, const RowPtrs* rp, const Activations& x,
                    float* out) {
  __m512 facc[R];
  __m256 macc[R];
  CW_UNROLL for (int r = 0; r < R; ++r) {
    facc[r] = _mm512_setzero_ps();
    macc[r] = _mm256_setzero_ps();
  }
  const __m512i idx[4] = {_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                          _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2),
                          _mm512_set_epi32(5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4),
                          _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6)};
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const BlockQ4_K& blk = blocks[sb];
    const __m128i smv = UnpackQ4KScalesV(blk.scales);
    const __m512i sc32 = _mm512_cvtepu8_epi32(smv);  // lanes 0..7 = scales (< 64)
    // mins duplicated per pair of bsums: madd(bsums, [m0 m0 m1 m1 ..]) = m_j * (sum of 32).
    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(smv, smv));
    const float d = HalfToFloat(blk.d), dmin = HalfToFloat(blk.dmin);
    __m512i isum[R];
    CW_UNROLL for (int r = 0; r < R; ++r) isum[r] = _mm512_setzero_si512();
    CW_UNROLL for (int c = 0; c < 4; ++c) {
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * c));
      const __m256i lo = _mm256_and_si256(qv, lo4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qv, 4), lo4);
      const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      const __m512i scv = _mm512_permutexvar_epi32(idx[c], sc32);
      CW_UNROLL for (int r = 0; r < R; ++r) {
        const __m512i xv = _mm512_loadu_si512(rp[r].x + sb * 256 + 64 * c);
        const __m512i prod = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv);
        // |prod| < 2^15 and scales are non-negative int16 in the low half of each lane.
        isum[r] = _mm512_add_epi32(isum[r], _mm512_madd_epi16(prod, scv));
      }
    }
    CW_UNROLL for (int r = 0; r < R; ++r) {
      const float dx = reinterpret_cast<const float*>(rp[r].x + x.scale_offset())[sb];
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_set1_ps(d * dx), facc[r]);
      const __m256i bs =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp[r].x + x.sums_offset() + sb * 32));
      macc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bs, m16)),
                                _mm256_set1_ps(dmin * dx), macc[r]);
    }
  }
  CW_UNROLL for (int r = 0; r < R; ++r) {
    out[r] = _mm512_reduce_add_ps(facc[r]) - ReduceAdd256(macc[r]);
  }
}

template <int R>
CW_VNNI void Q6KDot(const BlockQ6_K* blocks, int64_t nsb, const RowPtrs* rp, const Activations& x,
                    float* out) {
  __m512 facc[R];
  CW_UNROLL for (int r = 0; r < R; ++r) facc[r] = _mm512_setzero_ps();
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
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
    // madd_epi16 multiplies the low int16 of each lane: zero the high half (scales are signed).
    const __m512i sc32 = _mm512_and_si512(_mm512_cvtepi8_epi32(sc8), low16);
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    const float d = HalfToFloat(blk.d);
    __m512i isum[R];
    CW_UNROLL for (int r = 0; r < R; ++r) isum[r] = _mm512_setzero_si512();
    CW_UNROLL for (int h = 0; h < 2; ++h) {
      const __m512i qlv = _mm512_loadu_si512(blk.ql + 64 * h);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
      const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
      const __m512i wa = _mm512_or_si512(_mm512_and_si512(qlv, lo4),
                                         _mm512_and_si512(_mm512_sllv_epi16(qh2, shl_a), m30));
      const __m512i wb = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(qlv, 4), lo4),
                                         _mm512_and_si512(_mm512_srlv_epi16(qh2, shr_b), m30));
      const __m512i sca = _mm512_permutexvar_epi32(idx[2 * h], sc32);
      const __m512i scb = _mm512_permutexvar_epi32(idx[2 * h + 1], sc32);
      CW_UNROLL for (int r = 0; r < R; ++r) {
        const int8_t* xq = reinterpret_cast<const int8_t*>(rp[r].x) + sb * 256 + 128 * h;
        const __m512i pa = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wa, _mm512_loadu_si512(xq));
        const __m512i pb =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), wb, _mm512_loadu_si512(xq + 64));
        isum[r] = _mm512_add_epi32(
            isum[r], _mm512_add_epi32(_mm512_madd_epi16(pa, sca), _mm512_madd_epi16(pb, scb)));
      }
    }
    CW_UNROLL for (int r = 0; r < R; ++r) {
      const float dx = reinterpret_cast<const float*>(rp[r].x + x.scale_offset())[sb];
      const __m256i bs =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp[r].x + x.sums_offset() + sb * 32));
      // The stored quants are q + 32: subtract 32 * sum_s scale_s * bsum_s.
      const __m512i corr =
          _mm512_slli_epi32(_mm512_zextsi256_si512(_mm256_madd_epi16(bs, sc16)), 5);
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(isum[r], corr)),
                                _mm512_set1_ps(d * dx), facc[r]);
    }
  }
  CW_UNROLL for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(facc[r]);
}

template <int R>
CW_VNNI void KQuantRows(const Matrix& w, const JobRows& rows, int64_t i0, int64_t o0, int64_t o1) {
  RowPtrs rp[R];
  CW_UNROLL for (int r = 0; r < R; ++r) rp[r] = RowAt(rows, i0 + r);
  const int64_t nsb = w.n_in / 256;
  float out[R];
  for (int64_t o = o0; o < o1; ++o) {
    const auto* wrow = static_cast<const uint8_t*>(w.data) + o * w.row_bytes;
    if (w.type == GgmlType::kQ4_K) {
      Q4KDot<R>(reinterpret_cast<const BlockQ4_K*>(wrow), nsb, rp, *rows.x, out);
    } else {
      Q6KDot<R>(reinterpret_cast<const BlockQ6_K*>(wrow), nsb, rp, *rows.x, out);
    }
    CW_UNROLL for (int r = 0; r < R; ++r) rp[r].y[o] = out[r];
  }
}

template <int R>
CW_BF16 void Bf16Rows(const Matrix& w, const JobRows& rows, int64_t i0, int64_t o0, int64_t o1) {
  RowPtrs rp[R];
  CW_UNROLL for (int r = 0; r < R; ++r) rp[r] = RowAt(rows, i0 + r);
  const int64_t n = w.n_in;
  for (int64_t o = o0; o < o1; ++o) {
    const auto* wrow =
        reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(w.data) + o * w.row_bytes);
    __m512 acc0[R], acc1[R];
    CW_UNROLL for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 64 <= n; k += 64) {
      const __m512i w0 = _mm512_loadu_si512(wrow + k);
      const __m512i w1 = _mm512_loadu_si512(wrow + k + 32);
      CW_UNROLL for (int r = 0; r < R; ++r) {
        const auto* xr = reinterpret_cast<const uint16_t*>(rp[r].x) + k;
        acc0[r] = _mm512_dpbf16_ps(acc0[r], (__m512bh)_mm512_loadu_si512(xr), (__m512bh)w0);
        acc1[r] = _mm512_dpbf16_ps(acc1[r], (__m512bh)_mm512_loadu_si512(xr + 32), (__m512bh)w1);
      }
    }
    for (; k < n; k += 32) {
      const int64_t left = std::min<int64_t>(32, n - k);
      const __mmask32 m = static_cast<__mmask32>((left == 32) ? ~0u : ((1u << left) - 1));
      const __m512i w0 = _mm512_maskz_loadu_epi16(m, wrow + k);
      CW_UNROLL for (int r = 0; r < R; ++r) {
        const auto* xr = reinterpret_cast<const uint16_t*>(rp[r].x) + k;
        acc0[r] =
            _mm512_dpbf16_ps(acc0[r], (__m512bh)_mm512_maskz_loadu_epi16(m, xr), (__m512bh)w0);
      }
    }
    CW_UNROLL for (int r = 0; r < R; ++r) {
      rp[r].y[o] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
    }
  }
}

}  // namespace

CW_VNNI void KQuantTile(const Matrix& w, const JobRows& rows, int64_t o0, int64_t o1) {
  if (rows.n_rows >= 4) return KQuantPackedTile(w, rows, o0, o1);
  int64_t i = 0;
  for (; i + 4 <= rows.n_rows; i += 4) KQuantRows<4>(w, rows, i, o0, o1);
  switch (rows.n_rows - i) {
    case 3:
      KQuantRows<3>(w, rows, i, o0, o1);
      break;
    case 2:
      KQuantRows<2>(w, rows, i, o0, o1);
      break;
    case 1:
      KQuantRows<1>(w, rows, i, o0, o1);
      break;
    default:
      break;
  }
}

CW_BF16 void Bf16Tile(const Matrix& w, const JobRows& rows, int64_t o0, int64_t o1) {
  int64_t i = 0;
  for (; i + 4 <= rows.n_rows; i += 4) Bf16Rows<4>(w, rows, i, o0, o1);
  switch (rows.n_rows - i) {
    case 3:
      Bf16Rows<3>(w, rows, i, o0, o1);
      break;
    case 2:
      Bf16Rows<2>(w, rows, i, o0, o1);
      break;
    case 1:
      Bf16Rows<1>(w, rows, i, o0, o1);
      break;
    default:
      break;
  }
}

}  // namespace crossword::kernels::vnni
