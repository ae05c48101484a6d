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
// Rows of at most this many blocks (256 columns) multiply a copy a group of output tiles at a time
// (Q8Tile), the group's tiles at most kShortGroupBytes (in L1 with the rows' codes).
constexpr int64_t kShortRowBlocks = 8;
constexpr int64_t kShortGroupBytes = 16384;

// One block (32 columns) of a repacked 16-row tile: q[g] holds bytes 4g..4g+3 of the block for
// each of the 16 rows (lane i = row i) as u8 = w + 128; d holds the 16 rows' block scales.
// A tile is a run of these, one per block, whether repacked per call or once at load (RepackQ8).
struct alignas(64) PackedBlock {
  uint8_t q[8][64];
  float d[kOTile];
};
static_assert(sizeof(PackedBlock) == 576);

// Repacks blocks [b0, b0 + nb) of weight rows w0 .. w0 + (nv-1)*rb into p[0, nb) (rows past nv
// repeat the last valid row; their results are masked off). Q4_0 nibbles become
// u8 q + 120 = (q - 8) + 128.
CW_VNNI void Pack(GgmlType type, const uint8_t* w0, size_t rb, int nv, int64_t b0, int nb,
                  PackedBlock* p) {
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
    _mm512_store_ps(p[b].d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dw)));
    __m512i A[4], G[4];
    if (q8) {
      for (int half = 0; half < 2; ++half) {
        CW_UNROLL for (int j = 0; j < 4; ++j) A[j] = Load4x128(rows, j, off + 2 + 16 * half);
        Transpose4(A, G);
        CW_UNROLL for (int g = 0; g < 4; ++g) {
          _mm512_store_si512(p[b].q[4 * half + g], _mm512_xor_si512(G[g], flip));
        }
      }
    } else {
      CW_UNROLL for (int j = 0; j < 4; ++j) A[j] = Load4x128(rows, j, off + 2);
      Transpose4(A, G);
      CW_UNROLL for (int g = 0; g < 4; ++g) {
        const __m512i lo = _mm512_and_si512(G[g], lo4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(G[g], 4), lo4);
        _mm512_store_si512(p[b].q[g], _mm512_add_epi8(lo, off120));
        _mm512_store_si512(p[b].q[4 + g], _mm512_add_epi8(hi, off120));
      }
    }
  }
}

// acc[r] (16 outputs of row r) += sum over blocks of d_w * d_x * (sum (w+128) x - 128 sum x).
template <int R>
CW_VNNI inline void Q8Kernel(const PackedBlock* p, int nb, const int8_t* const* xq,
                             const float* const* xd, const int32_t* const* xs, __m512* acc,
                             const SpreadPrefetch& pf) {
  for (int b = 0; b < nb; ++b) {
    pf.Step(b);
    __m512i ai[R];
    CW_UNROLL for (int r = 0; r < R; ++r) ai[r] = _mm512_set1_epi32(xs[r][b]);
    CW_UNROLL for (int g = 0; g < 8; ++g) {
      const __m512i wv = _mm512_load_si512(p[b].q[g]);
      CW_UNROLL for (int r = 0; r < R; ++r) {
        ai[r] = _mm512_dpbusd_epi32(ai[r], wv, _mm512_set1_epi32(Load32(xq[r] + b * 32 + 4 * g)));
      }
    }
    const __m512 sw = _mm512_load_ps(p[b].d);
    CW_UNROLL for (int r = 0; r < R; ++r) {
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[r]),
                               _mm512_mul_ps(sw, _mm512_set1_ps(xd[r][b])), acc[r]);
    }
  }
}

// ---- Q4_0 tiles at the file's width. A 16-row tile of nb blocks holds q[b][j] (lane i = qs
// bytes 4j..4j+3 of block b of weight row i, as the file stores them: low nibbles are columns
// 4j..4j+3, high nibbles columns 16+4j..16+4j+3) for every block, then d[b] (the 16 rows' fp16
// scales): 288 bytes per 16 rows x 32 columns, the file's 18 per block. So a copy costs no more
// memory than the weights it repacks and a pass reads it at the file's size (the u8 layout above
// doubles it); the kernel splits the nibbles (two ops per 64 weights, shared by the rows).
constexpr int64_t kQ4TileBlockBytes = 4 * 64;  // q of one block; d follows all of a tile's q

// Bytes of one 16-row tile of w (Q4_0) in this layout.
constexpr size_t kQ4TileBlockAll = kQ4TileBlockBytes + sizeof(uint16_t) * kOTile;  // 288
static_assert(kQ4TileBlockAll == 16 * sizeof(BlockQ4_0));
inline size_t Q4TileBytes(const Matrix& w) {
  return static_cast<size_t>(w.n_in / 32) * kQ4TileBlockAll;
}

// Writes blocks [b0, b0 + nb) of weight rows w0 .. w0 + (nv-1)*rb into q[0, nb) and d[0, nb)
// (rows past nv repeat the last valid row; their results are masked off).
CW_VNNI void PackQ4(const uint8_t* w0, size_t rb, int nv, int64_t b0, int nb, uint8_t* q,
                    uint16_t* d) {
  const uint8_t* rows[kOTile];
  alignas(64) int32_t idx[kOTile];
  for (int i = 0; i < kOTile; ++i) {
    const int r = i < nv ? i : nv - 1;
    rows[i] = w0 + static_cast<size_t>(r) * rb;
    idx[i] = static_cast<int32_t>(static_cast<size_t>(r) * rb);
  }
  const __m512i vidx = _mm512_load_si512(idx);
  for (int b = 0; b < nb; ++b) {
    const size_t off = static_cast<size_t>(b0 + b) * sizeof(BlockQ4_0);
    const __m512i dw = _mm512_i32gather_epi32(vidx, w0 + off, 1);  // scale + 2 quant bytes
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 16 * b), _mm512_cvtepi32_epi16(dw));
    __m512i A[4], G[4];
    CW_UNROLL for (int j = 0; j < 4; ++j) A[j] = Load4x128(rows, j, off + 2);
    Transpose4(A, G);
    CW_UNROLL for (int j = 0; j < 4; ++j) {
      _mm512_storeu_si512(q + b * kQ4TileBlockBytes + 64 * j, G[j]);
    }
  }
}

// acc[r] (16 outputs of row r) += sum over blocks of d_w * d_x * (sum q x - 8 sum x), q the
// nibbles (w + 8): the same integer and float operations as Q8Kernel and the few-row path.
template <int R>
CW_VNNI inline void Q4Kernel(const uint8_t* q, const uint16_t* d, int nb, const int8_t* const* xq,
                             const float* const* xd, const int32_t* const* xs, __m512* acc,
                             const SpreadPrefetch& pf) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int b = 0; b < nb; ++b) {
    pf.Step(b);
    __m512i ai[R];
    // xs holds -128 * sum(x) per block, a multiple of 16: >> 4 is exactly -8 * sum(x).
    CW_UNROLL for (int r = 0; r < R; ++r) ai[r] = _mm512_set1_epi32(xs[r][b] >> 4);
    CW_UNROLL for (int j = 0; j < 4; ++j) {
      const __m512i v = _mm512_loadu_si512(q + b * kQ4TileBlockBytes + 64 * j);
      const __m512i lo = _mm512_and_si512(v, m4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      CW_UNROLL for (int r = 0; r < R; ++r) {
        const int8_t* x = xq[r] + b * 32;
        ai[r] = _mm512_dpbusd_epi32(ai[r], lo, _mm512_set1_epi32(Load32(x + 4 * j)));
        ai[r] = _mm512_dpbusd_epi32(ai[r], hi, _mm512_set1_epi32(Load32(x + 16 + 4 * j)));
      }
    }
    const __m512 sw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + 16 * b)));
    CW_UNROLL for (int r = 0; r < R; ++r) {
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[r]),
                               _mm512_mul_ps(sw, _mm512_set1_ps(xd[r][b])), acc[r]);
    }
  }
}

// A chunk of a file-width Q4_0 tile: its blocks' nibbles and fp16 scales.
struct Q4Chunk {
  const uint8_t* q;
  const uint16_t* d;
};

// The register-tile kernel of a chunk's layout: u8 blocks (Q8Kernel) or file-width Q4_0.
template <int R>
CW_VNNI inline void TileKernel(const PackedBlock* p, int nb, const int8_t* const* xq,
                               const float* const* xd, const int32_t* const* xs, __m512* acc,
                               const SpreadPrefetch& pf) {
  Q8Kernel<R>(p, nb, xq, xd, xs, acc, pf);
}
template <int R>
CW_VNNI inline void TileKernel(Q4Chunk c, int nb, const int8_t* const* xq, const float* const* xd,
                               const int32_t* const* xs, __m512* acc, const SpreadPrefetch& pf) {
  Q4Kernel<R>(c.q, c.d, nb, xq, xd, xs, acc, pf);
}

// The codes, block scales and block sums of activation rows [i0, i0 + R) from block b0 on, and
// their output rows (column 0), for a register tile.
template <int R>
CW_VNNI inline void RegisterTileRows(const JobRows& rows, int64_t i0, int64_t b0, const int8_t** xq,
                                     const float** xd, const int32_t** xs, float** y) {
  const Activations& x = *rows.x;
  CW_UNROLL for (int r = 0; r < R; ++r) {
    const RowPtrs rp = RowAt(rows, i0 + r);
    xq[r] = reinterpret_cast<const int8_t*>(rp.x) + b0 * 32;
    xd[r] = reinterpret_cast<const float*>(rp.x + x.scale_offset()) + b0;
    xs[r] = reinterpret_cast<const int32_t*>(rp.x + x.sums_offset()) + b0;
    y[r] = rp.y;
  }
}

// Activation rows [i0, i0 + R) against one chunk (blocks [b0, b0 + nb)) of a 16-row tile,
// into output columns [ot, ot + 16) (mask: the valid ones); `first` starts the sums at 0.
template <int R, class Tiles>
CW_VNNI void TileRows(Tiles tiles, int nb, int64_t b0, const JobRows& rows, int64_t i0, int64_t ot,
                      __mmask16 mask, bool first, const SpreadPrefetch& pf) {
  const int8_t* xq[R];
  const float* xd[R];
  const int32_t* xs[R];
  float* y[R];
  __m512 acc[R];
  RegisterTileRows<R>(rows, i0, b0, xq, xd, xs, y);
  CW_UNROLL for (int r = 0; r < R; ++r) {
    y[r] += ot;
    acc[r] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, y[r]);
  }
  TileKernel<R>(tiles, nb, xq, xd, xs, acc, pf);
  CW_UNROLL for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y[r], mask, acc[r]);
}

// TileRows<n> for the n < 8 rows left after the full register tiles (n <= R).
template <int R, class Tiles>
CW_VNNI void TileRowsRest(int n, Tiles tiles, int nb, int64_t b0, const JobRows& rows, int64_t i0,
                          int64_t ot, __mmask16 mask, bool first, const SpreadPrefetch& pf) {
  if (n == R) return TileRows<R>(tiles, nb, b0, rows, i0, ot, mask, first, pf);
  if constexpr (R > 1) TileRowsRest<R - 1>(n, tiles, nb, b0, rows, i0, ot, mask, first, pf);
}

// Every activation row of `rows` against one chunk: register tiles of 8 rows, then the rest; the
// first tile issues the chunk's prefetches.
template <class Tiles>
CW_VNNI void AllRowsOfChunk(Tiles tiles, int nb, int64_t b0, const JobRows& rows, int64_t ot,
                            __mmask16 mask, bool first, const SpreadPrefetch& pf) {
  const SpreadPrefetch none;
  int64_t i = 0;
  for (; i + 8 <= rows.n_rows; i += 8) {
    TileRows<8>(tiles, nb, b0, rows, i, ot, mask, first, i == 0 ? pf : none);
  }
  if (i < rows.n_rows) {
    TileRowsRest<7>(static_cast<int>(rows.n_rows - i), tiles, nb, b0, rows, i, ot, mask, first,
                    i == 0 ? pf : none);
  }
}

// Short rows of a u8 copy (one chunk: nb = all of a row's blocks): activation rows [i0, i0 + R)
// against output tiles [ot0, ot1) (clipped to o1), the tiles' blocks at `tiles` one after the
// other. The rows' pointers are set up once for all the tiles, not once per tile as in
// AllRowsOfChunk; each (row, tile) sum is Q8Kernel's from zero over the same blocks in the same
// order, so the bits are AllRowsOfChunk's.
template <int R>
CW_VNNI void RowsOfTiles(const PackedBlock* tiles, int nb, const JobRows& rows, int64_t i0,
                         int64_t ot0, int64_t ot1, int64_t o1) {
  const int8_t* xq[R];
  const float* xd[R];
  const int32_t* xs[R];
  float* y[R];
  RegisterTileRows<R>(rows, i0, 0, xq, xd, xs, y);
  const SpreadPrefetch none;
  for (int64_t ot = ot0; ot < ot1; ot += kOTile) {
    const int nv = static_cast<int>(std::min<int64_t>(kOTile, o1 - ot));
    const __mmask16 mask = static_cast<__mmask16>((1u << nv) - 1);
    __m512 acc[R];
    CW_UNROLL for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    Q8Kernel<R>(tiles + ((ot - ot0) / kOTile) * nb, nb, xq, xd, xs, acc, none);
    CW_UNROLL for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y[r] + ot, mask, acc[r]);
  }
}

// RowsOfTiles<n> for the n < 8 rows left after the full register tiles (n <= R).
template <int R>
CW_VNNI void RowsOfTilesRest(int n, const PackedBlock* tiles, int nb, const JobRows& rows,
                             int64_t i0, int64_t ot0, int64_t ot1, int64_t o1) {
  if (n == R) return RowsOfTiles<R>(tiles, nb, rows, i0, ot0, ot1, o1);
  if constexpr (R > 1) RowsOfTilesRest<R - 1>(n, tiles, nb, rows, i0, ot0, ot1, o1);
}

// Rows from which a chunk of a Q4_0 copy is expanded once into the u8 layout (Q8Kernel's) instead
// of splitting nibbles in every register tile: at 512 rows the in-tile split cost ~10 %
// (kernels_bench BM_MatMul rows 512), at 8 rows the expansion would cost more than it saves.
constexpr int64_t kQ4ExpandRows = 16;

// Blocks [0, nb) of a file-width Q4_0 chunk (q, d) in the u8 layout of Pack (q + 120).
CW_VNNI void ExpandQ4(const uint8_t* q, const uint16_t* d, int nb, PackedBlock* p) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i off120 = _mm512_set1_epi8(120);
  for (int b = 0; b < nb; ++b) {
    CW_UNROLL for (int j = 0; j < 4; ++j) {
      const __m512i v = _mm512_loadu_si512(q + b * kQ4TileBlockBytes + 64 * j);
      const __m512i lo = _mm512_and_si512(v, m4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      _mm512_store_si512(p[b].q[j], _mm512_add_epi8(lo, off120));
      _mm512_store_si512(p[b].q[4 + j], _mm512_add_epi8(hi, off120));
    }
    _mm512_store_ps(
        p[b].d, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + 16 * b))));
  }
}

// Q8Tile for Q4_0 weights with a file-width copy (`prepacked`: RepackQ8's, or nullptr), or with
// 4 .. kQ4ExpandRows - 1 rows and no copy (chunks repacked here per call in that layout). From a
// copy, kQ4ExpandRows rows or more multiply chunks expanded to the u8 layout.
CW_VNNI void Q4TileRows(const Matrix& w, const JobRows& rows, int64_t o0, int64_t o1,
                        const uint8_t* prepacked) {
  alignas(64) uint8_t scratch_q[kChunkBlocks * kQ4TileBlockBytes];
  alignas(64) uint16_t scratch_d[kChunkBlocks * kOTile];
  alignas(64) PackedBlock expanded[kChunkBlocks];
  const bool expand = prepacked && rows.n_rows >= kQ4ExpandRows;
  const int64_t nblocks = w.n_in / 32;
  const size_t tile_bytes = Q4TileBytes(w);
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t ot = o0; ot < o1; ot += kOTile) {
    const int nv = static_cast<int>(std::min<int64_t>(kOTile, o1 - ot));
    const __mmask16 mask = static_cast<__mmask16>((1u << nv) - 1);
    const uint8_t* tile = prepacked ? prepacked + (ot / kOTile) * tile_bytes : nullptr;
    for (int64_t b0 = 0; b0 < nblocks; b0 += kChunkBlocks) {
      const int nb = static_cast<int>(std::min<int64_t>(kChunkBlocks, nblocks - b0));
      const uint8_t* q = scratch_q;
      const uint16_t* d = scratch_d;
      SpreadPrefetch pf;
      if (tile) {
        q = tile + b0 * kQ4TileBlockBytes;
        d = reinterpret_cast<const uint16_t*>(tile + nblocks * kQ4TileBlockBytes) + b0 * kOTile;
        // The next chunk's nibbles, or the start of the next tile (its first chunk's nibbles,
        // and for tiles of one chunk its scales too, which follow them), into L2 while this
        // chunk is multiplied; the scales of later chunks (1/9 of the bytes) are left to the
        // hardware prefetcher. Unlike the u8
        // copies, one- to three-row products want it too: without it a one-row product from
        // these tiles ran at 0.75x the file-streaming path (BM_MatMul, Q4_0 head), with it 1.15x.
        if (b0 + nb < nblocks) {
          const int64_t next = std::min<int64_t>(kChunkBlocks, nblocks - b0 - nb);
          pf = SpreadPrefetch(q + nb * kQ4TileBlockBytes,
                              static_cast<size_t>(next) * kQ4TileBlockBytes, nb);
        } else if (ot + kOTile < o1) {
          pf = SpreadPrefetch(tile + tile_bytes,
                              std::min<size_t>(tile_bytes, kChunkBlocks * kQ4TileBlockAll), nb);
        }
        if (expand) ExpandQ4(q, d, nb, expanded);
      } else {
        PackQ4(base + ot * w.row_bytes, w.row_bytes, nv, b0, nb, scratch_q, scratch_d);
      }
      const bool first = b0 == 0;
      if (expand) {
        AllRowsOfChunk(static_cast<const PackedBlock*>(expanded), nb, b0, rows, ot, mask, first,
                       pf);
      } else {
        AllRowsOfChunk(Q4Chunk{q, d}, nb, b0, rows, ot, mask, first, pf);
      }
    }
  }
}

// ---- Few activation rows (decode): stream each weight row once, no repacking.

// Horizontal sums of 8 dpbusd results: v_i lanes 0-7 belong to block 2i, lanes 8-15 to block
// 2i+1. Combine1 pairs vectors, Combine2 finishes each 128-bit lane (both in vnni_util.h),
// Combine3 adds lane pairs.
// Returns the 16 block sums in natural order.
CW_VNNI inline __m512i Combine3(__m512i w0123, __m512i w4567) {
  const __m512i x = _mm512_shuffle_i32x4(w0123, w4567, _MM_SHUFFLE(2, 0, 2, 0));
  const __m512i y = _mm512_shuffle_i32x4(w0123, w4567, _MM_SHUFFLE(3, 1, 3, 1));
  // x + y holds blocks [0 2 4 6 | 1 3 5 7 | 8 10 12 14 | 9 11 13 15].
  const __m512i order = _mm512_set_epi32(15, 11, 14, 10, 13, 9, 12, 8, 7, 3, 6, 2, 5, 1, 4, 0);
  return _mm512_permutexvar_epi32(order, _mm512_add_epi32(x, y));
}

// The 64 u8 weights (w + 128) of Q8_0 blocks b, b+1: two 32-byte loads (a masked 64-byte load
// measured slower on AMD Zen 4).
CW_VNNI inline __m512i PairWeightsQ8(const uint8_t* blk) {
  const uint8_t* qs = blk + 2;
  const __m512i v = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + sizeof(BlockQ8_0))), 1);
  return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
}

// Q8_0: integer block sums of 16 blocks of one weight row with R activation rows: sums[r] lane j =
// exact sum over block b + j of w * x (the VNNI offset corrected), as float (|sum| < 2^24).
template <int R>
CW_VNNI inline void BlockSums16Q8(const uint8_t* blk, const int8_t* const* xq,
                                  const int32_t* const* xs, int64_t b, __m512* sums) {
  constexpr int64_t kBs = sizeof(BlockQ8_0);
  __m512i u[R][4];
  CW_UNROLL for (int j = 0; j < 4; ++j) {
    const __m512i wa = PairWeightsQ8(blk + (4 * j) * kBs);
    const __m512i wb = PairWeightsQ8(blk + (4 * j + 2) * kBs);
    CW_UNROLL for (int r = 0; r < R; ++r) {
      const int8_t* xp = xq[r] + (b + 4 * j) * 32;
      const __m512i pa = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wa, _mm512_loadu_si512(xp));
      const __m512i pb =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), wb, _mm512_loadu_si512(xp + 64));
      u[r][j] = Combine1(pa, pb);
    }
  }
  CW_UNROLL for (int r = 0; r < R; ++r) {
    const __m512i s = Combine3(Combine2(u[r][0], u[r][1]), Combine2(u[r][2], u[r][3]));
    const __m512i corr = _mm512_loadu_si512(xs[r] + b);  // -128 * sum(x) per block
    sums[r] = _mm512_cvtepi32_ps(_mm512_add_epi32(s, corr));
  }
}

// Q4_0, 16 blocks of one weight row: a 128-bit lane per block (4 blocks per vector, picked out of
// 72 bytes by one byte permute), low nibbles against the blocks' first 16 activations and high
// nibbles against the last 16 (xp: the activations regrouped that way by RegroupQ4), so two
// chained dot products leave 4 partial sums per block and two shuffle levels finish them.
template <int R>
CW_VNNI inline void BlockSums16Q4(const uint8_t* blk, const int8_t* const* xp,
                                  const int32_t* const* xs, int64_t b, __m512* sums) {
  // Byte 16j + t <- quad byte 18j + 2 + t (block j's quant t; indices 64.. are the tail).
  alignas(64) static constexpr uint8_t kIdx[64] = {
      2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17,  //
      20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35,  //
      38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53,  //
      56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71};
  const __m512i idx = _mm512_load_si512(kIdx);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512i p[R][4];
  CW_UNROLL for (int k = 0; k < 4; ++k) {
    const uint8_t* q = blk + 4 * k * sizeof(BlockQ4_0);
    const __m512i z = _mm512_loadu_si512(q);
    const __m512i tail =
        _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 64)));
    const __m512i qq = _mm512_permutex2var_epi8(z, idx, tail);
    const __m512i lo = _mm512_and_si512(qq, m4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(qq, 4), m4);
    CW_UNROLL for (int r = 0; r < R; ++r) {
      const int8_t* x = xp[r] + 128 * k;
      p[r][k] =
          _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_load_si512(x)),
                              hi, _mm512_load_si512(x + 64));
    }
  }
  // After the two levels dword 4L + m holds block 4m + L; put them back in block order.
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  CW_UNROLL for (int r = 0; r < R; ++r) {
    const __m512i t = Combine2(Combine1(p[r][0], p[r][1]), Combine1(p[r][2], p[r][3]));
    const __m512i corr = _mm512_loadu_si512(xs[r] + b);  // -128 * sum(x) per block
    sums[r] = _mm512_cvtepi32_ps(
        _mm512_add_epi32(_mm512_permutexvar_epi32(order, t), _mm512_srai_epi32(corr, 4)));
  }
}

// Regroups activation blocks [0, nb) (nb a multiple of 4) for BlockSums16Q4: per 4 blocks, their
// first 16 bytes, then their last 16 bytes.
CW_VNNI inline void RegroupQ4(const int8_t* x, int64_t nb, int8_t* out) {
  for (int64_t b = 0; b < nb; b += 4) {
    const __m512i a = _mm512_loadu_si512(x + 32 * b);
    const __m512i c = _mm512_loadu_si512(x + 32 * b + 64);
    _mm512_store_si512(out + 32 * b, _mm512_shuffle_i64x2(a, c, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm512_store_si512(out + 32 * b + 64, _mm512_shuffle_i64x2(a, c, _MM_SHUFFLE(3, 1, 3, 1)));
  }
}

// The same for one block (rows whose length is not a multiple of 512).
template <int R, bool kQ8>
CW_VNNI inline void BlockSum1(const uint8_t* blk, const int8_t* const* xq, const int32_t* const* xs,
                              int64_t b, float* sums) {
  __m256i wv;
  if constexpr (kQ8) {
    wv = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)),
                          _mm256_set1_epi8(static_cast<char>(0x80)));
  } else {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m256i t = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
    wv = _mm256_and_si256(t, _mm256_set1_epi8(0x0F));
  }
  CW_UNROLL for (int r = 0; r < R; ++r) {
    const __m256i p =
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), wv,
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[r] + b * 32)));
    const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    const __m128i h2 = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
    const int32_t isum = _mm_cvtsi128_si32(_mm_add_epi32(h2, _mm_shuffle_epi32(h2, 1)));
    sums[r] = static_cast<float>(isum + (kQ8 ? xs[r][b] : (xs[r][b] >> 4)));
  }
}

// Decode (few activation rows): each weight row is streamed once, in order, without repacking.
// Batch invariance: a row's result must be bit-identical to the repacked GEMM's (Q8Kernel),
// which adds the blocks in order, acc = fma(sum_b, d_w * d_x, acc). So the block sums of 16
// weight rows are collected (lanes = blocks) and transposed (lanes = weight rows), the fp16
// scales are copied straight into the transposed layout, and the blocks are added in order with
// the same fused multiply-adds.
template <int R, bool kQ8>
CW_VNNI void DirectQ8Rows(const Matrix& w, const JobRows& rows, int64_t i0, int64_t o0,
                          int64_t o1) {
  constexpr int64_t kBs = kQ8 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  constexpr int kGroups = 8;  // 16-block groups per pass over a tile: 4096 columns
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
  alignas(64) float sums[R][kGroups][kOTile][16];  // [r][group][weight row][block]
  alignas(64) int8_t xg[kQ8 ? 1 : R][kQ8 ? 64 : kGroups * 16 * 32];  // Q4_0: regrouped x
  // Scales go straight into the transposed layout (lanes = weight rows) with scalar 2-byte
  // copies: on AMD Zen 4 a 16-lane gather plus a transpose cost more than the 16 loads.
  alignas(64) uint16_t dws[kGroups][16][kOTile];  // [group][block][weight row], fp16
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t ot = o0; ot < o1; ot += kOTile) {
    const int nv = static_cast<int>(std::min<int64_t>(kOTile, o1 - ot));
    __m512 acc[R];
    CW_UNROLL for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t c0 = 0; c0 < nb; c0 += 16 * kGroups) {
      const int64_t c1 = std::min<int64_t>(nb, c0 + 16 * kGroups);
      // Q4_0: regroup this chunk's activations (once per call when the row is one chunk).
      if constexpr (!kQ8) {
        if (ot == o0 || nb > 16 * kGroups) {
          CW_UNROLL for (int r = 0; r < R; ++r) {
            RegroupQ4(xq[r] + c0 * 32, (c1 - c0) / 16 * 16, xg[r]);
          }
        }
      }
      for (int i = 0; i < kOTile; ++i) {
        const uint8_t* wrow = base + (ot + std::min(i, nv - 1)) * w.row_bytes;
        int64_t b = c0;
        int g = 0;
        for (; b + 16 <= c1; b += 16, ++g) {
          const uint8_t* blk = wrow + b * kBs;
          // Every line of the stream, far ahead (kPrefetchBytes; every other line measured
          // much slower).
          const uint8_t* ahead = blk + kPrefetchBytes;
          CW_UNROLL for (int64_t line = 0; line < 16 * kBs; line += 64) {
            _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T2);
          }
          __m512 s[R];
          if constexpr (kQ8) {
            BlockSums16Q8<R>(blk, xq, xs, b, s);
          } else {
            const int8_t* xgb[R];
            CW_UNROLL for (int r = 0; r < R; ++r) xgb[r] = xg[r] + (b - c0) * 32;
            BlockSums16Q4<R>(blk, xgb, xs, b, s);
          }
          CW_UNROLL for (int r = 0; r < R; ++r) _mm512_store_ps(sums[r][g][i], s[r]);
          CW_UNROLL for (int j = 0; j < 16; ++j) std::memcpy(&dws[g][j][i], blk + j * kBs, 2);
        }
        if (b < c1) {  // a last group of fewer than 16 blocks; unused lanes stay zero
          for (int r = 0; r < R; ++r) std::fill_n(sums[r][g][i], 16, 0.0f);
          for (int j = 0; j < 16; ++j) dws[g][j][i] = 0;
          for (int j = 0; b + j < c1; ++j) {
            const uint8_t* blk = wrow + (b + j) * kBs;
            float s[R];
            BlockSum1<R, kQ8>(blk, xq, xs, b + j, s);
            for (int r = 0; r < R; ++r) sums[r][g][i][j] = s[r];
            std::memcpy(&dws[g][j][i], blk, 2);
          }
        }
      }
      for (int g = 0; 16 * g + c0 < c1; ++g) {
        const int64_t b = c0 + 16 * g;
        const int nk = static_cast<int>(std::min<int64_t>(16, c1 - b));
        __m512 dT[16];  // converted once for all R activation rows
        for (int k = 0; k < nk; ++k) {
          dT[k] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dws[g][k])));
        }
        CW_UNROLL for (int r = 0; r < R; ++r) {
          __m512 sT[16];
          Transpose16(sums[r][g][0], sT);
          for (int k = 0; k < nk; ++k) {
            acc[r] =
                _mm512_fmadd_ps(sT[k], _mm512_mul_ps(dT[k], _mm512_set1_ps(xd[r][b + k])), acc[r]);
          }
        }
      }
    }
    const __mmask16 mask = static_cast<__mmask16>((1u << nv) - 1);
    CW_UNROLL for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(rp[r].y + ot, mask, acc[r]);
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
  // A copy repacked at load holds whole tiles from row 0; the matmul tasks start on tile edges.
  const auto* prepacked = o0 % kOTile == 0 ? static_cast<const PackedBlock*>(w.packed) : nullptr;
  // Few rows read a copy too when there is one: Q8_0's takes 36 bytes per 32 weights against
  // the file's 34 (one copy in the caches, and the tiny model's 4-block rows skip the direct
  // path's slow tail), Q4_0's exactly the file's 18, and its one- and two-row products ran 1.0-1.1x
  // and 1.3-1.4x as fast as the direct path's (BM_MoeExperts U 165, 2 threads).
  if (rows.n_rows <= kMaxDirectRows && !prepacked) {
    return w.type == GgmlType::kQ8_0 ? DirectQ8Tile<true>(w, rows, o0, o1)
                                     : DirectQ8Tile<false>(w, rows, o0, o1);
  }
  if (w.type == GgmlType::kQ4_0 && (prepacked || rows.n_rows < kQ4ExpandRows)) {
    return Q4TileRows(w, rows, o0, o1, static_cast<const uint8_t*>(prepacked ? w.packed : nullptr));
  }
  const int64_t nblocks = w.n_in / 32;
  if (prepacked && nblocks <= kShortRowBlocks) {
    // Short rows (the embedded model's 128 columns: 4 blocks) from a copy, any row count: the
    // register tiles' setup is a large share of a tile's few blocks, so each group of output
    // tiles that fits in L1 takes every row tile in turn, the rows' pointers set up once per
    // group (kernels_bench BM_MatMul Q8_0 n_in 128, 1 thread, 32 rows: 128 outputs 194-198 ->
    // 227-234 G ops/s, 4096 outputs 259-269 -> 320-335).
    const int64_t group =
        kOTile * std::max<int64_t>(
                     1, kShortGroupBytes / (static_cast<int64_t>(sizeof(PackedBlock)) * nblocks));
    const int nb = static_cast<int>(nblocks);
    for (int64_t g0 = o0; g0 < o1; g0 += group) {
      const int64_t g1 = std::min(o1, g0 + group);
      const PackedBlock* tiles = prepacked + (g0 / kOTile) * nblocks;
      int64_t i = 0;
      for (; i + 8 <= rows.n_rows; i += 8) RowsOfTiles<8>(tiles, nb, rows, i, g0, g1, o1);
      if (i < rows.n_rows) {
        RowsOfTilesRest<7>(static_cast<int>(rows.n_rows - i), tiles, nb, rows, i, g0, g1, o1);
      }
    }
    return;
  }
  alignas(64) PackedBlock scratch[kChunkBlocks];
  const auto* base = static_cast<const uint8_t*>(w.data);
  // Software prefetches for the copy (below): with 4+ rows, and with 2-3 rows of 512+ columns
  // (a real-width routed expert with the 1-3 rows a 32-row pass gives it: BM_MoeExperts Q8_0 U 165,
  // 2 threads, 4 alternated pairs, 2 rows 28.3-29.1 -> 31.7-33.8 GB/s, 3 rows 26.9-27.8
  // -> 32.4-33.1; one row is as fast without them, and the tiny model's 4-block rows are slower
  // with them).
  const bool prefetch = rows.n_rows > kMaxDirectRows || (rows.n_rows > 1 && nblocks >= 16);
  for (int64_t ot = o0; ot < o1; ot += kOTile) {
    const int nv = static_cast<int>(std::min<int64_t>(kOTile, o1 - ot));
    const __mmask16 mask = static_cast<__mmask16>((1u << nv) - 1);
    for (int64_t b0 = 0; b0 < nblocks; b0 += kChunkBlocks) {
      const int nb = static_cast<int>(std::min<int64_t>(kChunkBlocks, nblocks - b0));
      const PackedBlock* p = scratch;
      SpreadPrefetch pf;
      if (prepacked) {
        p = prepacked + (ot / kOTile) * nblocks + b0;
        // The next chunk of the copy (contiguous) into L2 while this one is multiplied, a few
        // lines per block of the first pass over it, when `prefetch` says it pays: one row streams
        // at the hardware prefetcher's pace, and on short rows the requests cost more than they
        // save (the tiny model's Q8_0 one-row step, 4-block rows, ran at 0.64x with a whole
        // chunk's requests per 4-block row).
        if (prefetch && (ot + kOTile < o1 || b0 + kChunkBlocks < nblocks)) {
          const int64_t next = b0 + nb < nblocks
                                   ? std::min<int64_t>(kChunkBlocks, nblocks - b0 - nb)
                                   : std::min<int64_t>(kChunkBlocks, nblocks);
          pf = SpreadPrefetch(p + nb, sizeof(PackedBlock) * static_cast<size_t>(next), nb);
        }
      } else {
        Pack(w.type, base + ot * w.row_bytes, w.row_bytes, nv, b0, nb, scratch);
      }
      AllRowsOfChunk(p, nb, b0, rows, ot, mask, b0 == 0, pf);
    }
  }
}

size_t Q8PackedBytes(const Matrix& w) {
  if (w.type == GgmlType::kQ4_0) {
    return static_cast<size_t>((w.n_out + kOTile - 1) / kOTile) * Q4TileBytes(w);
  }
  return static_cast<size_t>((w.n_out + kOTile - 1) / kOTile) * static_cast<size_t>(w.n_in / 32) *
         sizeof(PackedBlock);
}

CW_VNNI void RepackQ8(const Matrix& w, void* out) {
  const int64_t nblocks = w.n_in / 32;
  const auto* base = static_cast<const uint8_t*>(w.data);
  if (w.type == GgmlType::kQ4_0) {
    const size_t tile_bytes = Q4TileBytes(w);
    for (int64_t ot = 0; ot < w.n_out; ot += kOTile) {
      const int nv = static_cast<int>(std::min<int64_t>(kOTile, w.n_out - ot));
      auto* tile = static_cast<uint8_t*>(out) + (ot / kOTile) * tile_bytes;
      PackQ4(base + ot * w.row_bytes, w.row_bytes, nv, 0, static_cast<int>(nblocks), tile,
             reinterpret_cast<uint16_t*>(tile + nblocks * kQ4TileBlockBytes));
    }
    return;
  }
  auto* tiles = static_cast<PackedBlock*>(out);
  for (int64_t ot = 0; ot < w.n_out; ot += kOTile) {
    const int nv = static_cast<int>(std::min<int64_t>(kOTile, w.n_out - ot));
    for (int64_t b0 = 0; b0 < nblocks; b0 += kChunkBlocks) {
      const int nb = static_cast<int>(std::min<int64_t>(kChunkBlocks, nblocks - b0));
      Pack(w.type, base + ot * w.row_bytes, w.row_bytes, nv, b0, nb,
           tiles + (ot / kOTile) * nblocks + b0);
    }
  }
}

namespace {

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

CW_VNNI int32_t DpbusdChains(int64_t rounds) {
  // 16 chains: more than the instruction's latency times its throughput on the cores measured
  // (AMD Zen 4: 8 chains already reach the rate of 16), so the loop is bound by throughput alone.
  constexpr int kChains = 16;
  __m512i acc[kChains];
  CW_UNROLL for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(5);
  for (int64_t n = 0; n < rounds; ++n) {
    CW_UNROLL for (int i = 0; i < kChains; ++i) {
      acc[i] = _mm512_dpbusd_epi32(acc[i], w, x);
      // An empty statement that may change acc[i]: every chain's rounds stay in the program (the
      // compiler cannot fold a chain of constant products across rounds) and in a register.
      asm volatile("" : "+v"(acc[i]));
    }
  }
  __m512i sum = acc[0];
  CW_UNROLL for (int i = 1; i < kChains; ++i) sum = _mm512_add_epi32(sum, acc[i]);
  // The lanes added as unsigned (wrapping) numbers: long runs overflow int32, and GCC's
  // _mm512_reduce_add_epi32 adds them as signed ints, undefined behaviour (UBSan reported it in
  // Int8PeakRate's test). Only the instructions' count matters, not the value.
  alignas(64) uint32_t lanes[16];
  _mm512_store_si512(lanes, sum);
  uint32_t total = 0;
  for (uint32_t v : lanes) total += v;
  return static_cast<int32_t>(total);
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
