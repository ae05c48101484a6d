// Dispatching entry points of kernels.h (first version: parallel loops over the scalar twins).
#include <algorithm>

#include "base/error.h"
#include "kernels/kernels.h"
#include "kernels/ref.h"

namespace crossword::kernels {

void PrepareActivations(GgmlType weight_type, const float* x, int64_t n_rows, int64_t n_in,
                        int64_t ldx, Activations& out, ThreadPool& pool) {
  const ActFormat format = ActFormatFor(weight_type);
  out.SetShape(format, n_rows, n_in);
  pool.ParallelFor(n_rows, [&](int64_t r, int) {
    ref::QuantizeActRow(format, x + r * ldx, n_in, out.mutable_row(r), out.scale_offset(),
                        out.sums_offset());
  });
}

void MatMul(std::span<const MatMulJob> jobs, ThreadPool& pool) {
  for (size_t j = 0; j < jobs.size(); ++j) ref::CheckMatMulJob(jobs[j], j);
  constexpr int64_t kRowsPerTask = 64;
  int64_t n_tasks = 0;
  for (const auto& job : jobs) n_tasks += (job.w.n_out + kRowsPerTask - 1) / kRowsPerTask;
  pool.ParallelFor(n_tasks, [&](int64_t task, int) {
    size_t j = 0;
    for (;; ++j) {
      const int64_t n = (jobs[j].w.n_out + kRowsPerTask - 1) / kRowsPerTask;
      if (task < n) break;
      task -= n;
    }
    const MatMulJob& job = jobs[j];
    const int64_t o0 = task * kRowsPerTask, o1 = std::min(job.w.n_out, o0 + kRowsPerTask);
    for (int64_t i = 0; i < job.n_rows; ++i) {
      const int64_t xr = job.x_rows ? job.x_rows[i] : i;
      float* y = job.y + (job.y_rows ? job.y_rows[i] : i) * job.ldy;
      for (int64_t o = o0; o < o1; ++o) {
        const auto* w = static_cast<const uint8_t*>(job.w.data) + o * job.w.row_bytes;
        y[o] = static_cast<float>(ref::DotRow(job.w.type, w, *job.x, xr));
      }
    }
  });
}

void MatMul(const Matrix& w, const Activations& x, float* y, int64_t ldy, ThreadPool& pool) {
  const MatMulJob job{w, &x, x.n_rows(), nullptr, y, ldy, nullptr};
  MatMul(std::span<const MatMulJob>(&job, 1), pool);
}

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

const char* CurrentTargetName() { return "scalar-ref"; }
bool CpuHasAvx512Bf16() { return __builtin_cpu_supports("avx512bf16"); }

}  // namespace crossword::kernels
