// Dispatching entry points of kernels.h (first version: parallel loops over the scalar twins).
#include <algorithm>

#include "base/error.h"
#include "kernels/kernels.h"
#include "kernels/ref.h"

namespace crossword::kernels {

void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  ref::RmsNorm(x, w, y, n, eps);
}
void L2Norm(float* x, int64_t n, float eps) { ref::L2Norm(x, n, eps); }
void Softmax(float* x, int64_t n) { ref::Softmax(x, n); }
void RopeNeox(float* x, int64_t n_head, int64_t head_dim, int64_t head_stride, int n_rot,
              int64_t pos, float freq_base) {
  ref::RopeNeox(x, n_head, head_dim, head_stride, n_rot, pos, freq_base);
}
void SiluMul(const float* gate, const float* up, float* y, int64_t n) {
  ref::SiluMul(gate, up, y, n);
}
void Add(const float* a, const float* b, float* y, int64_t n) { ref::Add(a, b, y, n); }
void AddScaled(const float* x, float s, float* y, int64_t n) { ref::AddScaled(x, s, y, n); }
void Mul(const float* a, const float* b, float* y, int64_t n) { ref::Mul(a, b, y, n); }
void Scale(float* x, float s, int64_t n) { ref::Scale(x, s, n); }
void Sigmoid(const float* x, float* y, int64_t n) { ref::Sigmoid(x, y, n); }
void Silu(const float* x, float* y, int64_t n) { ref::Silu(x, y, n); }
void Softplus(const float* x, float* y, int64_t n) { ref::Softplus(x, y, n); }
void TopKSoftmax(const float* logits, int n_expert, int k, int32_t* ids, float* weights) {
  ref::TopKSoftmax(logits, n_expert, k, ids, weights);
}
void Attention(const AttentionArgs& args, ThreadPool&) { ref::Attention(args); }
void GatedDeltaRule(const GdnArgs& args, ThreadPool&) { ref::GatedDeltaRule(args); }
void CausalConv1dSilu(const Conv1dArgs& args, ThreadPool&) { ref::CausalConv1dSilu(args); }

}  // namespace crossword::kernels
