// AVX-512 VNNI / AVX512_BF16 matrix kernels, called by the AVX3_DL Highway target of matmul.cc.
// Highway 1.0.3 has no int8 quad dot product and its AVX3_DL attributes omit avx512vnni and
// avx512bf16, so these live in their own translation unit with function target attributes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace crossword::kernels::vnni {

/// The rows of one MatMulJob as the tile kernels see them.
struct JobRows {
  const Activations* x;
  int64_t n_rows;
  const int32_t* x_rows;  ///< nullptr = identity
  float* y;
  int64_t ldy;
  const int32_t* y_rows;  ///< nullptr = identity
};

/// y[.][o0, o1) for Q8_0 or Q4_0 weights (w.type) and kQ8_0 activations. Without a load-time
/// copy (w.packed), up to 3 activation rows stream each weight row of the file once. Otherwise
/// 16 weight rows x 2048 columns at a time are read in a tile layout (4-byte groups interleaved
/// across the rows): Q8_0 as u8 with a +128 offset; Q4_0 as the file's nibbles (its copy has
/// the file's size), split in the kernel, or expanded per chunk to the u8 layout for 16+ rows;
/// the tiles come from w.packed when RepackQ8 made it (then for any number of rows), else they
/// are repacked here per call; then vpdpbusd with register tiles of up to 8 activation rows.
/// Every path gives bit-identical rows. Requires AVX512 VNNI.
void Q8Tile(const Matrix& w, const JobRows& rows, int64_t o0, int64_t o1);

/// Bytes of the tile layout RepackQ8 writes for `w`: per 16 rows x 32 columns 576 for Q8_0, 288
/// for Q4_0 (the file's size).
size_t Q8PackedBytes(const Matrix& w);

/// Writes w (Q8_0 or Q4_0) in Q8Tile's tile layout to `out` (Q8PackedBytes(w) bytes, 64-byte
/// aligned). Requires AVX512 VNNI.
void RepackQ8(const Matrix& w, void* out);

/// y[.][o0, o1) for Q4_K, Q5_K or Q6_K weights and kQ8_K activations: up to 3 activation rows
/// stream each weight row once, more go to KQuantPackedTile; both give bit-identical rows.
/// Requires AVX512 VNNI.
void KQuantTile(const Matrix& w, const JobRows& rows, int64_t o0, int64_t o1);

/// K-quant weights with many activation rows: 16 weight rows x 2048 columns repacked once (or
/// read from w.packed when RepackK made it), then register tiles of up to 4 activation rows
/// (called by KQuantTile for >= 4 rows).
void KQuantPackedTile(const Matrix& w, const JobRows& rows, int64_t o0, int64_t o1);

/// Bytes of the tile layout RepackK writes for Q4_K / Q5_K / Q6_K `w`: per 16 weight rows and
/// 2048 columns one packed tile (Q6_K 35,840 bytes, about 1.33x the file's 6.56 bits per weight);
/// 0 (no copy) when w.n_in is not a multiple of 2048, which the layout would pad.
size_t KQuantPackedBytes(const Matrix& w);

/// Writes w (Q4_K, Q5_K or Q6_K) in KQuantPackedTile's tile layout to `out`
/// (KQuantPackedBytes(w) bytes, 64-byte aligned). Requires AVX512 VNNI.
void RepackK(const Matrix& w, void* out);

/// y[.][o0, o1) for BF16 weights and kBF16 activations with vdpbf16ps. Requires AVX512_BF16
/// (check CpuHasAvx512Bf16() first).
void Bf16Tile(const Matrix& w, const JobRows& rows, int64_t o0, int64_t o1);

/// Runs `rounds` rounds of 16 independent 512-bit vpdpbusd chains (16 x 64 = 1,024 multiply-adds
/// per round) on the calling thread and returns a value derived from every chain, so that the
/// loop cannot be removed. The instruction-throughput probe behind Int8PeakRate. Requires AVX512
/// VNNI.
int32_t DpbusdChains(int64_t rounds);

}  // namespace crossword::kernels::vnni
