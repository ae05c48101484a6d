// Scalar reference (de)quantization of GGML block formats: the slow, obvious twins of the SIMD
// kernels. Bit-exact with the published reference code of the GGUF formats (ggml-quants.c
// `quantize_row_*_ref` / `dequantize_row_*`), evaluated in plain IEEE float without contraction.
#pragma once

#include <cstdint>

#include "core/quant_blocks.h"
#include "core/types.h"

namespace crossword {

/// True if DequantizeRow supports `type` (every float and block type; not I8..I64).
bool CanDequantize(GgmlType type);
/// True if QuantizeRow supports `type`: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
/// Q4_K, Q5_K, Q6_K, Q8_K.
bool CanQuantize(GgmlType type);

/// Converts `n` elements of `type` at `src` (packed blocks, any alignment) to floats in `dst`.
/// `n` must be a multiple of the type's block size. Throws crossword::Error (naming the type
/// and `n`) for an unsupported type or a bad `n`; never reads past n/block_size blocks. With
/// `n` = 0 it touches nothing, and `src`/`dst` may be null.
void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);

/// Quantizes `n` floats to `type`, writing n/block_size blocks to `dst` (any alignment). Same
/// result, bit for bit, as the ggml `quantize_row_<type>_ref` functions (no importance matrix),
/// which is what llama-quantize produces without an imatrix. Throws crossword::Error for an
/// unsupported type or an `n` that is not a multiple of the block size. With `n` = 0 it touches
/// nothing, and `src`/`dst` may be null.
void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n);

// Per-type entry points (n = element count, a multiple of the block size; no checks).
// Formulas: see the block structs in core/quant_blocks.h.

void DequantizeRowQ4_0(const BlockQ4_0* x, float* y, int64_t n);
void DequantizeRowQ4_1(const BlockQ4_1* x, float* y, int64_t n);
void DequantizeRowQ5_0(const BlockQ5_0* x, float* y, int64_t n);
void DequantizeRowQ5_1(const BlockQ5_1* x, float* y, int64_t n);
void DequantizeRowQ8_0(const BlockQ8_0* x, float* y, int64_t n);
void DequantizeRowQ8_1(const BlockQ8_1* x, float* y, int64_t n);
void DequantizeRowQ2_K(const BlockQ2_K* x, float* y, int64_t n);
void DequantizeRowQ3_K(const BlockQ3_K* x, float* y, int64_t n);
void DequantizeRowQ4_K(const BlockQ4_K* x, float* y, int64_t n);
void DequantizeRowQ5_K(const BlockQ5_K* x, float* y, int64_t n);
void DequantizeRowQ6_K(const BlockQ6_K* x, float* y, int64_t n);
void DequantizeRowQ8_K(const BlockQ8_K* x, float* y, int64_t n);

/// Q4_0: per block of 32, d = (the element of largest magnitude) / -8, q = min(15, trunc(x/d
/// + 8.5)).
void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t n);
/// Q4_1: d = (max - min) / 15, m = min, q = min(15, trunc((x - min)/d + 0.5)).
void QuantizeRowQ4_1(const float* x, BlockQ4_1* y, int64_t n);
/// Q5_0: d = (largest-magnitude element) / -16, q = min(31, trunc(x/d + 16.5)).
void QuantizeRowQ5_0(const float* x, BlockQ5_0* y, int64_t n);
/// Q5_1: d = (max - min) / 31, m = min, q = trunc((x - min)/d + 0.5).
void QuantizeRowQ5_1(const float* x, BlockQ5_1* y, int64_t n);
/// Q8_0: d = amax / 127, q = round(x/d) (round half away from zero).
void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t n);
/// Q8_1: as Q8_0, plus s = d * sum(q).
void QuantizeRowQ8_1(const float* x, BlockQ8_1* y, int64_t n);
/// Q4_K: per sub-block of 32 a weighted min/scale search (ggml make_qkx2_quants, weights
/// rms + |x|, 20 steps), 6-bit scales and mins relative to fp16 d and dmin.
void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t n);
/// Q5_K: as Q4_K with quants in [0, 31] (make_qkx2_quants rmin -0.5, 15 steps) and a 5th bit
/// per element in qh.
void QuantizeRowQ5_K(const float* x, BlockQ5_K* y, int64_t n);
/// Q6_K: per sub-block of 16 an RMSE-weighted scale search (ggml make_qx_quants, rmse_type 1),
/// int8 scales relative to fp16 d, 6-bit quants.
void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t n);
/// Q8_K (the activation format of K-quant dot products): d = max / -127 (max = the element of
/// largest magnitude, sign kept), q = min(127, nearest(x/d)), bsums = sums of 16 quants.
void QuantizeRowQ8_K(const float* x, BlockQ8_K* y, int64_t n);

}  // namespace crossword
