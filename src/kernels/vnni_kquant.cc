// Q4_K / Q6_K GEMM for many activation rows (prefill, MoE experts) on AVX-512 VNNI: 16 weight
// rows x 2048 columns are repacked once (4-byte groups interleaved across rows, scales and mins
// as per-row vectors) and multiplied with register tiles of up to 4 activation rows.
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

constexpr int kRows = 16;     // weight rows per tile: one zmm lane each
constexpr int kChunkSb = 8;   // super-blocks (256 columns) per repacked chunk: 2048 columns
constexpr int kMaxTileR = 4;  // activation rows per register tile

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

CW_VNNI void PackQ4K(const uint8_t* w0, size_t rb, int nv, int64_t sb0, int nsb, PackedQ4K* p) {
  const uint8_t* rows[kRows];
  for (int i = 0; i < kRows; ++i) rows[i] = w0 + static_cast<size_t>(i < nv ? i : nv - 1) * rb;
  const __m512i lo4 = _mm512_set1_epi8(0x0F);
  for (int s = 0; s < nsb; ++s) {
    const size_t off = static_cast<size_t>(sb0 + s) * sizeof(BlockQ4_K);
    for (int r = 0; r < kRows; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ4_K*>(rows[r] + off);
      uint32_t u[4];
      UnpackQ4KScales(blk->scales, u);
      const auto* b = reinterpret_cast<const uint8_t*>(u);  // 8 scales, then 8 mins
      for (int j = 0; j < 8; ++j) p->sc[s][j][r] = b[j];
      for (int q = 0; q < 4; ++q) p->mp[s][q][r] = b[8 + 2 * q] | (b[9 + 2 * q] << 16);
      p->d[s][r] = _cvtsh_ss(blk->d);
      p->dmin[s][r] = _cvtsh_ss(blk->dmin);
    }
    // Chunk c (64 columns) comes from qs[32c .. 32c+32): low nibbles are columns 0..31, high
    // nibbles 32..63, so dword t of the chunk's bytes feeds groups 16c + t and 16c + 8 + t.
    for (int c = 0; c < 4; ++c) {
      for (int half = 0; half < 2; ++half) {
        __m512i A[4], G[4];
        const size_t qoff = off + offsetof(BlockQ4_K, qs) + 32 * c + 16 * half;
        CW_UNROLL for (int j = 0; j < 4; ++j) A[j] = Load4x128(rows, j, qoff);
        Transpose4(A, G);
        CW_UNROLL for (int t = 0; t < 4; ++t) {
          const int g = 16 * c + 4 * half + t;
          _mm512_store_si512(p->q[s][g], _mm512_and_si512(G[t], lo4));
          _mm512_store_si512(p->q[s][g + 8], _mm512_and_si512(_mm512_srli_epi16(G[t], 4), lo4));
        }
      }
    }
  }
}

// acc[r] (16 weight rows) += d*dx * sum_j sc_j * (q . x)_j  -  dmin*dx * sum_j m_j * bsum_j.
template <int R>
CW_VNNI inline void Q4KKernel(const PackedQ4K* p, int nsb, const int8_t* const* xq,
                              const float* const* xd, const int16_t* const* xs, __m512* acc) {
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

// Q6_K tile: q[s][g] lane r: the 4 stored quants (u8 = q + 32, 0..63) of group g; sc[s][u]
// lane r: int8 scale of sub-block u (16 columns); sp[s][p] lane r: scales of sub-blocks 2p and
// 2p+1 as two int16 (for the -32 offset term); d: fp16 scale.
struct alignas(64) PackedQ6K {
  uint8_t q[kChunkSb][64][64];
  int32_t sc[kChunkSb][16][kRows];
  int32_t sp[kChunkSb][8][kRows];
  float d[kChunkSb][kRows];
};

CW_VNNI void PackQ6K(const uint8_t* w0, size_t rb, int nv, int64_t sb0, int nsb, PackedQ6K* p) {
  const uint8_t* rows[kRows];
  for (int i = 0; i < kRows; ++i) rows[i] = w0 + static_cast<size_t>(i < nv ? i : nv - 1) * rb;
  const __m512i lo4 = _mm512_set1_epi8(0x0F), lo2 = _mm512_set1_epi8(0x03);
  for (int s = 0; s < nsb; ++s) {
    const size_t off = static_cast<size_t>(sb0 + s) * sizeof(BlockQ6_K);
    for (int r = 0; r < kRows; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ6_K*>(rows[r] + off);
      for (int u = 0; u < 16; ++u) p->sc[s][u][r] = blk->scales[u];
      for (int q = 0; q < 8; ++q) {
        p->sp[s][q][r] = static_cast<int32_t>(
            static_cast<uint16_t>(blk->scales[2 * q]) |
            (static_cast<uint32_t>(static_cast<uint16_t>(blk->scales[2 * q + 1])) << 16));
      }
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
          _mm512_store_si512(p->q[s][32 * h + 8 * quarter + t],
                             _mm512_or_si512(low, _mm512_slli_epi16(high, 4)));
        }
      }
    }
  }
}

// acc[r] += d*dx * (sum_u sc_u * (q . x)_u - 32 * sum_u sc_u * bsum_u).
template <int R>
CW_VNNI inline void Q6KKernel(const PackedQ6K* p, int nsb, const int8_t* const* xq,
                              const float* const* xd, const int16_t* const* xs, __m512* acc) {
  for (int s = 0; s < nsb; ++s) {
    __m512i isum[R], corr[R];
    CW_UNROLL for (int r = 0; r < R; ++r) {
      isum[r] = _mm512_setzero_si512();
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[r] + 16 * s));
      const __m128i b0 = _mm256_castsi256_si128(bs), b1 = _mm256_extracti128_si256(bs, 1);
      __m512i c = _mm512_setzero_si512();
      c = _mm512_dpwssd_epi32(c, _mm512_load_si512(p->sp[s][0]),
                              _mm512_set1_epi32(_mm_extract_epi32(b0, 0)));
      c = _mm512_dpwssd_epi32(c, _mm512_load_si512(p->sp[s][1]),
                              _mm512_set1_epi32(_mm_extract_epi32(b0, 1)));
      c = _mm512_dpwssd_epi32(c, _mm512_load_si512(p->sp[s][2]),
                              _mm512_set1_epi32(_mm_extract_epi32(b0, 2)));
      c = _mm512_dpwssd_epi32(c, _mm512_load_si512(p->sp[s][3]),
                              _mm512_set1_epi32(_mm_extract_epi32(b0, 3)));
      c = _mm512_dpwssd_epi32(c, _mm512_load_si512(p->sp[s][4]),
                              _mm512_set1_epi32(_mm_extract_epi32(b1, 0)));
      c = _mm512_dpwssd_epi32(c, _mm512_load_si512(p->sp[s][5]),
                              _mm512_set1_epi32(_mm_extract_epi32(b1, 1)));
      c = _mm512_dpwssd_epi32(c, _mm512_load_si512(p->sp[s][6]),
                              _mm512_set1_epi32(_mm_extract_epi32(b1, 2)));
      c = _mm512_dpwssd_epi32(c, _mm512_load_si512(p->sp[s][7]),
                              _mm512_set1_epi32(_mm_extract_epi32(b1, 3)));
      corr[r] = c;
    }
    CW_UNROLL for (int u = 0; u < 16; ++u) {
      __m512i part[R];
      CW_UNROLL for (int r = 0; r < R; ++r) part[r] = _mm512_setzero_si512();
      CW_UNROLL for (int g = 0; g < 4; ++g) {
        const __m512i wv = _mm512_load_si512(p->q[s][4 * u + g]);
        CW_UNROLL for (int r = 0; r < R; ++r) {
          part[r] = _mm512_dpbusd_epi32(
              part[r], wv, _mm512_set1_epi32(Load32(xq[r] + 256 * s + 16 * u + 4 * g)));
        }
      }
      const __m512i scv = _mm512_load_si512(p->sc[s][u]);
      CW_UNROLL for (int r = 0; r < R; ++r) {
        isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(part[r], scv));
      }
    }
    const __m512 dv = _mm512_load_ps(p->d[s]);
    CW_UNROLL for (int r = 0; r < R; ++r) {
      const __m512i total = _mm512_sub_epi32(isum[r], _mm512_slli_epi32(corr[r], 5));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total),
                               _mm512_mul_ps(dv, _mm512_set1_ps(xd[r][s])), acc[r]);
    }
  }
}

template <int R, class Packed>
CW_VNNI void KRows(const Packed* p, int nsb, int64_t sb0, const JobRows& rows, int64_t i0,
                   int64_t ot, __mmask16 mask, bool first) {
  const int8_t* xq[R];
  const float* xd[R];
  const int16_t* xs[R];
  float* y[R];
  __m512 acc[R];
  const Activations& x = *rows.x;
  CW_UNROLL for (int r = 0; r < R; ++r) {
    const RowPtrs rp = RowAt(rows, i0 + r);
    xq[r] = reinterpret_cast<const int8_t*>(rp.x) + sb0 * 256;
    xd[r] = reinterpret_cast<const float*>(rp.x + x.scale_offset()) + sb0;
    xs[r] = reinterpret_cast<const int16_t*>(rp.x + x.sums_offset()) + sb0 * 16;
    y[r] = rp.y + ot;
    acc[r] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, y[r]);
  }
  if constexpr (std::is_same_v<Packed, PackedQ4K>) {
    Q4KKernel<R>(p, nsb, xq, xd, xs, acc);
  } else {
    Q6KKernel<R>(p, nsb, xq, xd, xs, acc);
  }
  CW_UNROLL for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y[r], mask, acc[r]);
}

template <class Packed>
CW_VNNI void PackedKTile(const Matrix& w, const JobRows& rows, int64_t o0, int64_t o1) {
  alignas(64) Packed p;
  const int64_t nsb_all = w.n_in / 256;
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t ot = o0; ot < o1; ot += kRows) {
    const int nv = static_cast<int>(std::min<int64_t>(kRows, o1 - ot));
    const __mmask16 mask = static_cast<__mmask16>((1u << nv) - 1);
    for (int64_t sb0 = 0; sb0 < nsb_all; sb0 += kChunkSb) {
      const int nsb = static_cast<int>(std::min<int64_t>(kChunkSb, nsb_all - sb0));
      if constexpr (std::is_same_v<Packed, PackedQ4K>) {
        PackQ4K(base + ot * w.row_bytes, w.row_bytes, nv, sb0, nsb, &p);
      } else {
        PackQ6K(base + ot * w.row_bytes, w.row_bytes, nv, sb0, nsb, &p);
      }
      const bool first = sb0 == 0;
      int64_t i = 0;
      for (; i + kMaxTileR <= rows.n_rows; i += kMaxTileR) {
        KRows<kMaxTileR>(&p, nsb, sb0, rows, i, ot, mask, first);
      }
      switch (rows.n_rows - i) {
        case 3:
          KRows<3>(&p, nsb, sb0, rows, i, ot, mask, first);
          break;
        case 2:
          KRows<2>(&p, nsb, sb0, rows, i, ot, mask, first);
          break;
        case 1:
          KRows<1>(&p, nsb, sb0, rows, i, ot, mask, first);
          break;
        default:
          break;
      }
    }
  }
}

}  // namespace

CW_VNNI void KQuantPackedTile(const Matrix& w, const JobRows& rows, int64_t o0, int64_t o1) {
  if (w.type == GgmlType::kQ4_K) return PackedKTile<PackedQ4K>(w, rows, o0, o1);
  PackedKTile<PackedQ6K>(w, rows, o0, o1);
}

}  // namespace crossword::kernels::vnni
