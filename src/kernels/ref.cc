// Scalar reference kernels: the obvious loops that the Highway kernels are checked against.
// Formulas follow ggml's CPU backend (cited per function in ref.h / kernels.h).
#include "kernels/ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "base/fp16.h"
#include "core/quant.h"
#include "core/quant_blocks.h"

namespace crossword::kernels::ref {
namespace {

size_t RoundUp64(size_t n) { return (n + 63) & ~size_t{63}; }

// Scales and mins of Q4_K sub-block j (6-bit values packed in 12 bytes).
void ScaleMinK4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

float Silu1(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

int64_t ActBlockSize(ActFormat format) {
  switch (format) {
    case ActFormat::kQ8_0:
      return kQK8_0;
    case ActFormat::kQ8_K:
      return kQK_K;
    default:
      return 1;
  }
}

ActRowLayout ActLayout(ActFormat format, int64_t n_in) {
  const size_t n = static_cast<size_t>(n_in);
  ActRowLayout l;
  switch (format) {
    case ActFormat::kF32:
      l.stride = RoundUp64(4 * n);
      break;
    case ActFormat::kF16:
    case ActFormat::kBF16:
      l.stride = RoundUp64(2 * n);
      break;
    case ActFormat::kQ8_0:  // quants, float scale and int32 sum per block of 32
      l.scale = RoundUp64(n);
      l.sums = l.scale + RoundUp64(4 * (n / kQK8_0));
      l.stride = l.sums + RoundUp64(4 * (n / kQK8_0));
      break;
    case ActFormat::kQ8_K:  // quants, float scale per 256, int16 sum per 16, quants + 128
      l.scale = RoundUp64(n);
      l.sums = l.scale + RoundUp64(4 * (n / kQK_K));
      l.biased = l.sums + RoundUp64(2 * (n / 16));
      l.stride = l.biased + RoundUp64(n);
      break;
  }
  return l;
}

size_t ActRowStride(ActFormat format, int64_t n_in) { return ActLayout(format, n_in).stride; }

void QuantizeActRow(ActFormat format, const float* x, int64_t n_in, uint8_t* row) {
  const ActRowLayout layout = ActLayout(format, n_in);
  switch (format) {
    case ActFormat::kF32:
      std::memcpy(row, x, sizeof(float) * n_in);
      return;
    case ActFormat::kF16: {
      auto* out = reinterpret_cast<uint16_t*>(row);
      for (int64_t k = 0; k < n_in; ++k) out[k] = F32ToF16(x[k]);
      return;
    }
    case ActFormat::kBF16: {
      auto* out = reinterpret_cast<uint16_t*>(row);
      for (int64_t k = 0; k < n_in; ++k) out[k] = F32ToBF16(x[k]);
      return;
    }
    case ActFormat::kQ8_0:
    case ActFormat::kQ8_K:
      break;
  }
  auto* qs = reinterpret_cast<int8_t*>(row);
  auto* scales = reinterpret_cast<float*>(row + layout.scale);
  const int64_t bs = ActBlockSize(format);
  for (int64_t b = 0; b < n_in / bs; ++b) {
    const float* xb = x + b * bs;
    int8_t* qb = qs + b * bs;
    if (format == ActFormat::kQ8_0) {
      float amax = 0.0f;
      for (int64_t j = 0; j < bs; ++j) amax = std::max(amax, std::fabs(xb[j]));
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      scales[b] = F16ToF32(F32ToF16(amax / 127.0f));
      for (int64_t j = 0; j < bs; ++j) qb[j] = static_cast<int8_t>(std::nearbyint(xb[j] * id));
    } else {
      float amax = 0.0f, max = 0.0f;
      for (int64_t j = 0; j < bs; ++j) {
        if (std::fabs(xb[j]) > amax) {
          amax = std::fabs(xb[j]);
          max = xb[j];
        }
      }
      if (amax == 0.0f) {
        scales[b] = 0.0f;
        std::memset(qb, 0, bs);
      } else {
        const float iscale = -127.0f / max;
        for (int64_t j = 0; j < bs; ++j) {
          const int v = static_cast<int>(std::nearbyint(iscale * xb[j]));
          qb[j] = static_cast<int8_t>(std::min(127, v));
        }
        scales[b] = 1.0f / iscale;
      }
    }
  }
  if (format == ActFormat::kQ8_0) {
    auto* sums = reinterpret_cast<int32_t*>(row + layout.sums);
    for (int64_t b = 0; b < n_in / bs; ++b) {
      int sum = 0;
      for (int j = 0; j < bs; ++j) sum += qs[b * bs + j];
      sums[b] = -128 * sum;
    }
  } else {
    auto* sums = reinterpret_cast<int16_t*>(row + layout.sums);
    for (int64_t s = 0; s < n_in / 16; ++s) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += qs[s * 16 + j];
      sums[s] = static_cast<int16_t>(sum);
    }
    uint8_t* biased = row + layout.biased;
    for (int64_t k = 0; k < n_in; ++k) biased[k] = static_cast<uint8_t>(qs[k] + 128);
  }
}

void PrepareActivations(GgmlType weight_type, const float* x, int64_t n_rows, int64_t n_in,
                        int64_t ldx, Activations& out) {
  const ActFormat format = ActFormatFor(weight_type);
  out.SetShape(format, n_rows, n_in);
  for (int64_t r = 0; r < n_rows; ++r) {
    QuantizeActRow(format, x + r * ldx, n_in, out.mutable_row(r));
  }
}

double DotRow(GgmlType type, const void* w, const Activations& x, int64_t r) {
  const int64_t n = x.n_in();
  const uint8_t* row = x.row(r);
  const auto* xq = reinterpret_cast<const int8_t*>(row);
  const auto* xd = reinterpret_cast<const float*>(row + x.scale_offset());
  const auto* xs = reinterpret_cast<const int16_t*>(row + x.sums_offset());
  double acc = 0.0;
  switch (type) {
    case GgmlType::kF32: {
      const auto* a = static_cast<const float*>(w);
      const auto* b = reinterpret_cast<const float*>(row);
      for (int64_t k = 0; k < n; ++k) acc += static_cast<double>(a[k] * b[k]);
      return acc;
    }
    case GgmlType::kF16: {  // f32 activations (ActFormatFor)
      const auto* a = static_cast<const uint16_t*>(w);
      const auto* b = reinterpret_cast<const float*>(row);
      for (int64_t k = 0; k < n; ++k) acc += static_cast<double>(F16ToF32(a[k]) * b[k]);
      return acc;
    }
    case GgmlType::kBF16: {
      const auto* a = static_cast<const uint16_t*>(w);
      const auto* b = reinterpret_cast<const uint16_t*>(row);
      for (int64_t k = 0; k < n; ++k) {
        acc += static_cast<double>(BF16ToF32(a[k]) * BF16ToF32(b[k]));
      }
      return acc;
    }
    case GgmlType::kQ8_0: {
      const auto* blocks = static_cast<const BlockQ8_0*>(w);
      for (int64_t b = 0; b < n / kQK8_0; ++b) {
        int sumi = 0;
        for (int j = 0; j < kQK8_0; ++j) sumi += blocks[b].qs[j] * xq[b * kQK8_0 + j];
        acc += static_cast<double>(F16ToF32(blocks[b].d) * xd[b]) * sumi;
      }
      return acc;
    }
    case GgmlType::kQ4_0: {
      const auto* blocks = static_cast<const BlockQ4_0*>(w);
      for (int64_t b = 0; b < n / kQK4_0; ++b) {
        int sumi = 0;
        for (int j = 0; j < kQK4_0 / 2; ++j) {
          sumi += ((blocks[b].qs[j] & 0xF) - 8) * xq[b * kQK4_0 + j];
          sumi += ((blocks[b].qs[j] >> 4) - 8) * xq[b * kQK4_0 + j + 16];
        }
        acc += static_cast<double>(F16ToF32(blocks[b].d) * xd[b]) * sumi;
      }
      return acc;
    }
    case GgmlType::kQ4_K: {
      const auto* blocks = static_cast<const BlockQ4_K*>(w);
      for (int64_t b = 0; b < n / kQK_K; ++b) {
        const BlockQ4_K& blk = blocks[b];
        const int8_t* q8 = xq + b * kQK_K;
        int isum = 0, msum = 0;
        for (int j = 0; j < 8; ++j) {  // sub-blocks of 32: 64 elements share 32 bytes of qs
          int sc, m;
          ScaleMinK4(j, blk.scales, &sc, &m);
          const uint8_t* qs = blk.qs + (j / 2) * 32;
          int s = 0;
          for (int l = 0; l < 32; ++l) {
            const int q = (j % 2 == 0) ? (qs[l] & 0xF) : (qs[l] >> 4);
            s += q * q8[j * 32 + l];
          }
          isum += sc * s;
          msum += m * (xs[b * 16 + 2 * j] + xs[b * 16 + 2 * j + 1]);
        }
        acc += static_cast<double>(F16ToF32(blk.d) * xd[b]) * isum -
               static_cast<double>(F16ToF32(blk.dmin) * xd[b]) * msum;
      }
      return acc;
    }
    case GgmlType::kQ5_K: {  // as Q4_K; the 5th bit of element 32j + l is bit j of qh[l]
      const auto* blocks = static_cast<const BlockQ5_K*>(w);
      for (int64_t b = 0; b < n / kQK_K; ++b) {
        const BlockQ5_K& blk = blocks[b];
        const int8_t* q8 = xq + b * kQK_K;
        int isum = 0, msum = 0;
        for (int j = 0; j < 8; ++j) {
          int sc, m;
          ScaleMinK4(j, blk.scales, &sc, &m);
          const uint8_t* qs = blk.qs + (j / 2) * 32;
          int s = 0;
          for (int l = 0; l < 32; ++l) {
            const int lo = (j % 2 == 0) ? (qs[l] & 0xF) : (qs[l] >> 4);
            s += (lo | (((blk.qh[l] >> j) & 1) << 4)) * q8[j * 32 + l];
          }
          isum += sc * s;
          msum += m * (xs[b * 16 + 2 * j] + xs[b * 16 + 2 * j + 1]);
        }
        acc += static_cast<double>(F16ToF32(blk.d) * xd[b]) * isum -
               static_cast<double>(F16ToF32(blk.dmin) * xd[b]) * msum;
      }
      return acc;
    }
    case GgmlType::kQ6_K: {
      const auto* blocks = static_cast<const BlockQ6_K*>(w);
      for (int64_t b = 0; b < n / kQK_K; ++b) {
        const BlockQ6_K& blk = blocks[b];
        const int8_t* q8 = xq + b * kQK_K;
        int isum = 0;
        for (int e = 0; e < kQK_K; ++e) {  // element e: half h, quarter q, lane l
          const int h = e / 128, quarter = (e % 128) / 32, l = e % 32;
          const uint8_t ql = blk.ql[h * 64 + (quarter % 2) * 32 + l];
          const int lo = quarter < 2 ? (ql & 0xF) : (ql >> 4);
          const int hi = (blk.qh[h * 32 + l] >> (2 * quarter)) & 3;
          isum += blk.scales[e / 16] * ((lo | (hi << 4)) - 32) * q8[e];
        }
        acc += static_cast<double>(F16ToF32(blk.d) * xd[b]) * isum;
      }
      return acc;
    }
    default:
      Fail("kernels: no dot product for weight type {}", TypeName(type));
  }
}

void CheckMatMulJob(const MatMulJob& job, size_t index) {
  const Matrix& w = job.w;
  Check(job.x != nullptr, "MatMul job {}: x is null", index);
  const ActFormat want = ActFormatFor(w.type);
  Check(job.x->format() == want,
        "MatMul job {}: activations were prepared for another weight type (format {} vs {} "
        "needed by {}); call PrepareActivations with the weight's type",
        index, static_cast<int>(job.x->format()), static_cast<int>(want), TypeName(w.type));
  Check(job.x->n_in() == w.n_in, "MatMul job {}: activations have n_in {} but the weight has {}",
        index, job.x->n_in(), w.n_in);
  const auto rb = RowBytes(w.type, w.n_in);
  Check(rb.has_value() && w.row_bytes >= *rb,
        "MatMul job {}: weight row_bytes {} is smaller than {} {} elements need", index,
        w.row_bytes, w.n_in, TypeName(w.type));
  Check(w.data != nullptr || w.n_out == 0, "MatMul job {}: weight data is null", index);
  Check(job.y != nullptr || job.n_rows == 0, "MatMul job {}: y is null", index);
  Check(job.ldy >= w.n_out, "MatMul job {}: ldy {} < n_out {}", index, job.ldy, w.n_out);
  Check(job.n_rows >= 0, "MatMul job {}: negative n_rows {}", index, job.n_rows);
  if (job.x_rows == nullptr) {
    Check(job.n_rows <= job.x->n_rows(), "MatMul job {}: n_rows {} > prepared rows {}", index,
          job.n_rows, job.x->n_rows());
  } else {
    for (int64_t i = 0; i < job.n_rows; ++i) {
      Check(job.x_rows[i] >= 0 && job.x_rows[i] < job.x->n_rows(),
            "MatMul job {}: x_rows[{}] = {} is outside the {} prepared rows", index, i,
            job.x_rows[i], job.x->n_rows());
    }
  }
  if (job.y_rows != nullptr) {
    for (int64_t i = 0; i < job.n_rows; ++i) {
      Check(job.y_rows[i] >= 0, "MatMul job {}: y_rows[{}] = {} is negative", index, i,
            job.y_rows[i]);
    }
  }
}

void MatMul(const MatMulJob& job) {
  CheckMatMulJob(job, 0);
  for (int64_t i = 0; i < job.n_rows; ++i) {
    const int64_t xr = job.x_rows ? job.x_rows[i] : i;
    const int64_t yr = job.y_rows ? job.y_rows[i] : i;
    Check(xr >= 0 && xr < job.x->n_rows(), "MatMul: x_rows[{}] = {} is outside [0, {})", i, xr,
          job.x->n_rows());
    float* y = job.y + yr * job.ldy;
    for (int64_t o = 0; o < job.w.n_out; ++o) {
      const auto* wrow = static_cast<const uint8_t*>(job.w.data) + o * job.w.row_bytes;
      y[o] = static_cast<float>(DotRow(job.w.type, wrow, *job.x, xr));
    }
  }
}

void MatMulDequantized(const Matrix& w, const float* x, int64_t n_rows, int64_t ldx, float* y,
                       int64_t ldy) {
  std::vector<float> row(static_cast<size_t>(w.n_in));
  for (int64_t o = 0; o < w.n_out; ++o) {
    DequantizeRow(w.type, static_cast<const uint8_t*>(w.data) + o * w.row_bytes, row.data(),
                  w.n_in);
    for (int64_t r = 0; r < n_rows; ++r) {
      double acc = 0.0;
      for (int64_t k = 0; k < w.n_in; ++k) acc += static_cast<double>(row[k]) * x[r * ldx + k];
      y[r * ldy + o] = static_cast<float>(acc);
    }
  }
}

void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float scale = 1.0f / std::sqrt(static_cast<float>(sum / n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * (w ? w[i] : 1.0f);
}

void L2Norm(float* x, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float scale = 1.0f / std::max(std::sqrt(static_cast<float>(sum)), eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

void Softmax(float* x, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

int64_t ArgMax(const float* x, int64_t n, int64_t exclude) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (i == exclude) continue;
    if (best < 0 || x[i] > x[best]) best = i;
  }
  return best;
}

float SoftmaxProb(const float* x, int64_t n, int64_t i) {
  float max = -INFINITY;
  for (int64_t j = 0; j < n; ++j) max = std::max(max, x[j]);
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(x[j] - max);
  return static_cast<float>(static_cast<double>(std::exp(x[i] - max)) / sum);
}

void RopeNeox(float* x, int64_t n_head, int64_t, int64_t head_stride, int n_rot, int64_t pos,
              float freq_base) {
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_rot));
  const int half = n_rot / 2;
  for (int64_t h = 0; h < n_head; ++h) {
    float* xh = x + h * head_stride;
    float theta = static_cast<float>(pos);
    for (int i = 0; i < half; ++i) {
      const float c = std::cos(theta), s = std::sin(theta);
      const float x0 = xh[i], x1 = xh[i + half];
      xh[i] = x0 * c - x1 * s;
      xh[i + half] = x0 * s + x1 * c;
      theta *= theta_scale;
    }
  }
}

void SiluMul(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Silu1(gate[i]) * up[i];
}
void Add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}
void AddScaled(const float* x, float s, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += s * x[i];
}
void Mul(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}
void WeightedSum(std::span<const float* const> x, std::span<const float> w, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float acc = 0.0f;
    for (size_t j = 0; j < x.size(); ++j) acc += w[j] * x[j][i];
    y[i] = acc;
  }
}
void Scale(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}
void Sigmoid(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}
void Silu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Silu1(x[i]);
}
void Softplus(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 20.0f ? x[i] : std::log1p(std::exp(x[i]));
}

void TopKSoftmax(const float* logits, int n_expert, int k, int32_t* ids, float* weights) {
  Check(n_expert >= 1 && n_expert <= 1024 && k >= 1 && k <= n_expert,
        "TopKSoftmax: need 1 <= k ({}) <= n_expert ({}) <= 1024", k, n_expert);
  std::vector<float> p(logits, logits + n_expert);
  Softmax(p.data(), n_expert);
  std::vector<int32_t> order(n_expert);
  for (int i = 0; i < n_expert; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  float sum = 0.0f;
  for (int i = 0; i < k; ++i) {
    ids[i] = order[i];
    weights[i] = p[order[i]];
    sum += weights[i];
  }
  const float denom = std::max(sum, 6.103515625e-5f);
  for (int i = 0; i < k; ++i) weights[i] /= denom;
}

}  // namespace crossword::kernels::ref
