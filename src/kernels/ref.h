// Scalar reference twins of the kernels in kernels.h: simple loops, double accumulation where
// llama.cpp uses it, no threads. The fast kernels are tested against these on every target.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace crossword::kernels::ref {

/// Byte offsets inside one activation row of `format` with n_in elements: Activations::row()'s
/// layout. Each region starts on a 64-byte boundary; fields a format lacks are 0.
struct ActRowLayout {
  size_t scale = 0;   ///< integer formats: float[n_in / block] scales
  size_t sums = 0;    ///< integer formats: the block sums (see ActFormat)
  size_t biased = 0;  ///< kQ8_K: the quants + 128 as uint8_t[n_in]
  size_t stride = 0;  ///< bytes of the whole row (a multiple of 64)
};
ActRowLayout ActLayout(ActFormat format, int64_t n_in);
/// Bytes of one activation row of `format` with n_in elements (ActLayout(...).stride).
size_t ActRowStride(ActFormat format, int64_t n_in);
/// Block size of an activation format (1, 32 or 256).
int64_t ActBlockSize(ActFormat format);

/// Converts one row of n_in floats into `format` at `row` (ActLayout(format, n_in).stride bytes),
/// laid out as ActLayout describes. Formulas: kQ8_0 as ggml's x86
/// quantize_row_q8_0 (d = amax/127 stored as fp16, q = nearest-even(x * 127/amax));
/// kQ8_K as ggml quantize_row_q8_K_ref (iscale = -127/max, q = min(127, nearest-even(iscale*x)),
/// d = 1/iscale); kF16/kBF16 round to nearest even.
void QuantizeActRow(ActFormat format, const float* x, int64_t n_in, uint8_t* row);

/// Scalar PrepareActivations (same contract as kernels::PrepareActivations, single thread).
void PrepareActivations(GgmlType weight_type, const float* x, int64_t n_rows, int64_t n_in,
                        int64_t ldx, Activations& out);

/// Dot product of weight row `w` (n_in elements of `type`) with activation row r of `x`, as
/// llama.cpp's vec_dot: exact integer sums per block, one float multiply-add per block (or per
/// super-block for K-quants), accumulated in double here.
double DotRow(GgmlType type, const void* w, const Activations& x, int64_t r);

/// Scalar MatMul of one job (same contract as kernels::MatMul). Throws crossword::Error on
/// shape/format mismatch.
void MatMul(const MatMulJob& job);

/// y[r * ldy + o] = sum_k dequant(W[o])[k] * x[r * ldx + k], accumulated in double, for
/// r < n_rows, o < w.n_out: the product with f32 activations (no activation quantization) that
/// the GPU backend's float path computes. W rows dequantized with core's DequantizeRow.
void MatMulDequantized(const Matrix& w, const float* x, int64_t n_rows, int64_t ldx, float* y,
                       int64_t ldy);

void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps);
void L2Norm(float* x, int64_t n, float eps);
void Softmax(float* x, int64_t n);
int64_t ArgMax(const float* x, int64_t n, int64_t exclude);
float SoftmaxProb(const float* x, int64_t n, int64_t i);
void RopeNeox(float* x, int64_t n_head, int64_t head_dim, int64_t head_stride, int n_rot,
              int64_t pos, float freq_base);
void SiluMul(const float* gate, const float* up, float* y, int64_t n);
void Add(const float* a, const float* b, float* y, int64_t n);
void AddScaled(const float* x, float s, float* y, int64_t n);
void Mul(const float* a, const float* b, float* y, int64_t n);
void WeightedSum(std::span<const float* const> x, std::span<const float> w, float* y, int64_t n);
void Scale(float* x, float s, int64_t n);
void Sigmoid(const float* x, float* y, int64_t n);
void Silu(const float* x, float* y, int64_t n);
void Softplus(const float* x, float* y, int64_t n);
void TopKSoftmax(const float* logits, int n_expert, int k, int32_t* ids, float* weights);

/// Two-pass softmax attention (scores of all visible keys, then normalize), double sums.
void Attention(const AttentionArgs& args);
/// Token-by-token gated delta rule (args.mode is ignored), double dot products.
void GatedDeltaRule(const GdnArgs& args);
void CausalConv1dSilu(const Conv1dArgs& args);

/// Argument checks shared by the fast entry points and the twins (throw crossword::Error).
void CheckAttentionArgs(const AttentionArgs& args);
void CheckGdnArgs(const GdnArgs& args);
void CheckConv1dArgs(const Conv1dArgs& args);
void CheckMatMulJob(const MatMulJob& job, size_t index);

}  // namespace crossword::kernels::ref
