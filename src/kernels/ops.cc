// Row operations (RmsNorm, L2Norm, Softmax, RoPE, elementwise activations, routing) and the
// causal conv1d, vectorized per Highway target. Formulas follow ggml's CPU ops (see kernels.h).
// clang-format off
#include "kernels/hwy_config.h"  // must precede every Highway header
// clang-format on

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/error.h"
#include "kernels/kernels.h"
#include "kernels/ref.h"

#ifndef CROSSWORD_KERNELS_OPS_ENUMS
#define CROSSWORD_KERNELS_OPS_ENUMS
namespace crossword::kernels::detail {
// Shared by all targets: the exported functions must have one signature.
enum class Unary { kSigmoid, kSilu, kSoftplus };
enum class Binary { kSiluMul, kAdd, kMul, kAxpy, kScale };
}  // namespace crossword::kernels::detail
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/ops.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"  // after highway.h
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace crossword::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {  // per-target helpers stay private to this file
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using detail::Binary;
using detail::Unary;

// sum of x[i]^2 with float products accumulated in double (ggml_float), as ggml's norms do.
double SumSquaresF64(const float* HWY_RESTRICT x, int64_t n) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> dfh;  // as many floats as doubles
  const int64_t N = hn::Lanes(dd);
  auto a0 = hn::Zero(dd), a1 = hn::Zero(dd);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto x0 = hn::LoadU(dfh, x + i), x1 = hn::LoadU(dfh, x + i + N);
    a0 = hn::Add(a0, hn::PromoteTo(dd, hn::Mul(x0, x0)));
    a1 = hn::Add(a1, hn::PromoteTo(dd, hn::Mul(x1, x1)));
  }
  double s = hn::GetLane(hn::SumOfLanes(dd, hn::Add(a0, a1)));
  for (; i < n; ++i) s += static_cast<double>(x[i] * x[i]);
  return s;
}

// y[i] = x[i] * s * (w ? w[i] : 1).
void ScaleMulRow(const float* HWY_RESTRICT x, const float* HWY_RESTRICT w, float s, float* y,
                 int64_t n) {
  const DF d;
  const int64_t N = hn::Lanes(d);
  const VF vs = hn::Set(d, s);
  int64_t i = 0;
  if (w) {
    for (; i + N <= n; i += N) {
      hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, x + i), vs), hn::LoadU(d, w + i)), d, y + i);
    }
    for (; i < n; ++i) y[i] = x[i] * s * w[i];
  } else {
    for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), vs), d, y + i);
    for (; i < n; ++i) y[i] = x[i] * s;
  }
}

void RmsNormImpl(const float* x, const float* w, float* y, int64_t n, float eps) {
  const float mean = static_cast<float>(SumSquaresF64(x, n) / static_cast<double>(n));
  ScaleMulRow(x, w, 1.0f / std::sqrt(mean + eps), y, n);
}

void L2NormImpl(float* x, int64_t n, float eps) {
  const float norm = std::sqrt(static_cast<float>(SumSquaresF64(x, n)));
  ScaleMulRow(x, nullptr, 1.0f / std::max(norm, eps), x, n);
}

// max of x[0, n) (-inf for n = 0).
float MaxOf(const float* HWY_RESTRICT x, int64_t n) {
  const DF d;
  const int64_t N = hn::Lanes(d);
  float max = -INFINITY;
  int64_t i = 0;
  if (n >= N) {
    // Four independent maxima (a maximum is exact, so any order gives the same value), against
    // one chain of dependent steps.
    auto m0 = hn::Set(d, -INFINITY), m1 = m0, m2 = m0, m3 = m0;
    for (; i + 4 * N <= n; i += 4 * N) {
      m0 = hn::Max(m0, hn::LoadU(d, x + i));
      m1 = hn::Max(m1, hn::LoadU(d, x + i + N));
      m2 = hn::Max(m2, hn::LoadU(d, x + i + 2 * N));
      m3 = hn::Max(m3, hn::LoadU(d, x + i + 3 * N));
    }
    for (; i + N <= n; i += N) m0 = hn::Max(m0, hn::LoadU(d, x + i));
    max = hn::GetLane(hn::MaxOfLanes(d, hn::Max(hn::Max(m0, m1), hn::Max(m2, m3))));
  }
  for (; i < n; ++i) max = std::max(max, x[i]);
  return max;
}

// sum of exp(x[i] - max), each exp in float, summed in double; the exps go to out[0, n) when out
// is not null (out may be x). Every kStopCheck vectors the sum so far is passed to `stop`, and a
// true answer ends the sum there, returning that partial sum (callers that stop pass out null).
constexpr int64_t kStopCheck = 32;
template <class Stop>
double SumExpF64Until(const float* x, int64_t n, float max, float* out, const Stop& stop) {
  const DF d;
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> dfh;
  const int64_t N = hn::Lanes(d), NH = hn::Lanes(dd);
  const VF vmax = hn::Set(d, max);
  auto sum = hn::Zero(dd);
  int64_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  if (N == 2 * NH) {
    // The two halves of each vector of exps promoted from the register (the same lanes and order
    // as through memory below; a store and two half-width reloads stalled on forwarding).
    const hn::Half<DF> dhalf;
    for (int64_t v = 1; i + N <= n; i += N, ++v) {
      const VF e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vmax));
      if (out) hn::StoreU(e, d, out + i);
      sum = hn::Add(sum, hn::PromoteTo(dd, hn::LowerHalf(dhalf, e)));
      sum = hn::Add(sum, hn::PromoteTo(dd, hn::UpperHalf(dhalf, e)));
      if (v % kStopCheck == 0 && stop(hn::GetLane(hn::SumOfLanes(dd, sum)))) {
        return hn::GetLane(hn::SumOfLanes(dd, sum));
      }
    }
  }
#endif
  alignas(64) float scratch[HWY_MAX_BYTES / sizeof(float)];
  for (int64_t v = 1; i + N <= n; i += N, ++v) {
    float* e = out ? out + i : scratch;
    hn::StoreU(hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vmax)), d, e);
    for (int64_t j = 0; j < N; j += NH)
      sum = hn::Add(sum, hn::PromoteTo(dd, hn::LoadU(dfh, e + j)));
    if (v % kStopCheck == 0 && stop(hn::GetLane(hn::SumOfLanes(dd, sum)))) {
      return hn::GetLane(hn::SumOfLanes(dd, sum));
    }
  }
  double s = hn::GetLane(hn::SumOfLanes(dd, sum));
  for (; i < n; ++i) {
    const float e = std::exp(x[i] - max);
    if (out) out[i] = e;
    s += e;
  }
  return s;
}

double SumExpF64(const float* x, int64_t n, float max, float* out) {
  return SumExpF64Until(x, n, max, out, [](double) { return false; });
}

void SoftmaxImpl(float* x, int64_t n) {
  const double s = SumExpF64(x, n, MaxOf(x, n), x);
  ScaleMulRow(x, nullptr, static_cast<float>(1.0 / s), x, n);
}

int64_t ArgMaxImpl(const float* x, int64_t n, int64_t exclude) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  const int64_t N = hn::Lanes(d);
  if (n < 2 * N) return ref::ArgMax(x, n, exclude);
  // The lane of the excluded index in the vector starting at i (exclude is in [i, i + N)).
  auto excluded_lane = [&](int64_t i) {
    return hn::RebindMask(d,
                          hn::Eq(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(exclude - i))));
  };
  // Pass 1: the max over the kept indices (the excluded lane reads -inf), NaNs noted.
  // Four independent maxima and NaN masks, four vectors a step (a maximum is exact, so the order
  // does not change it; the index is found in pass 2).
  const VF ninf = hn::Set(d, -INFINITY);
  auto kept = [&](int64_t i) {
    VF v = hn::LoadU(d, x + i);
    if (exclude >= i && exclude < i + N) v = hn::IfThenElse(excluded_lane(i), ninf, v);
    return v;
  };
  VF m[4] = {ninf, ninf, ninf, ninf};
  auto nan = hn::FirstN(d, 0);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    HWY_UNROLL(4) for (int k = 0; k < 4; ++k) {
      nan = hn::Or(nan, hn::IsNaN(hn::LoadU(d, x + i + k * N)));
      m[k] = hn::Max(m[k], kept(i + k * N));
    }
  }
  for (; i + N <= n; i += N) {
    nan = hn::Or(nan, hn::IsNaN(hn::LoadU(d, x + i)));
    m[0] = hn::Max(m[0], kept(i));
  }
  float max = hn::GetLane(hn::MaxOfLanes(d, hn::Max(hn::Max(m[0], m[1]), hn::Max(m[2], m[3]))));
  for (int64_t j = i; j < n; ++j) {
    if (std::isnan(x[j])) return ref::ArgMax(x, n, exclude);
    if (j != exclude) max = std::max(max, x[j]);
  }
  if (!hn::AllFalse(d, nan)) return ref::ArgMax(x, n, exclude);
  // Pass 2: the first kept index holding it (every kept value is <= max, none is NaN).
  const VF vm = hn::Set(d, max);
  for (i = 0; i + N <= n; i += N) {
    auto eq = hn::Eq(hn::LoadU(d, x + i), vm);
    if (exclude >= i && exclude < i + N) {
      eq = hn::AndNot(excluded_lane(i), eq);
    }
    const intptr_t k = hn::FindFirstTrue(d, eq);
    if (k >= 0) return i + k;
  }
  for (int64_t j = i; j < n; ++j) {
    if (j != exclude && x[j] == max) return j;
  }
  return -1;  // only the excluded index held values (n - 1 of them -inf is still a match)
}

float SoftmaxProbImpl(const float* x, int64_t n, int64_t at) {
  const float max = MaxOf(x, n);
  const double s = SumExpF64(x, n, max, nullptr);
  return static_cast<float>(static_cast<double>(std::exp(x[at] - max)) / s);
}

// SoftmaxProbImpl's value from its sum, or from a partial sum once that gives less than `below`
// (the sum and the division as SoftmaxProbImpl: double and float rounding are monotone, so a
// larger sum never gives a larger probability).
float SoftmaxProbAboveImpl(const float* x, int64_t n, int64_t at, float below, float max) {
  if (std::isnan(max)) max = MaxOf(x, n);
  const double e_at = static_cast<double>(std::exp(x[at] - max));
  const auto prob = [e_at](double s) { return static_cast<float>(e_at / s); };
  return prob(
      SumExpF64Until(x, n, max, nullptr, [&](double partial) { return prob(partial) < below; }));
}

void RopeNeoxImpl(float* x, int64_t n_head, int64_t head_stride, int n_rot, int64_t pos,
                  float freq_base) {
  const int half = n_rot / 2;
  // cos/sin once per call (shared by all heads), in float exactly as ggml's rope cache.
  alignas(64) float c[256], s[256];
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_rot));
  float theta = static_cast<float>(pos);
  for (int i = 0; i < half; ++i) {
    c[i] = std::cos(theta);
    s[i] = std::sin(theta);
    theta *= theta_scale;
  }
  const DF d;
  const int N = static_cast<int>(hn::Lanes(d));
  for (int64_t h = 0; h < n_head; ++h) {
    float* x0 = x + h * head_stride;
    float* x1 = x0 + half;
    int i = 0;
    for (; i + N <= half; i += N) {
      const VF a = hn::LoadU(d, x0 + i), b = hn::LoadU(d, x1 + i);
      const VF vc = hn::Load(d, c + i), vs = hn::Load(d, s + i);
      hn::StoreU(hn::Sub(hn::Mul(a, vc), hn::Mul(b, vs)), d, x0 + i);
      hn::StoreU(hn::Add(hn::Mul(a, vs), hn::Mul(b, vc)), d, x1 + i);
    }
    for (; i < half; ++i) {
      const float a = x0[i], b = x1[i];
      x0[i] = a * c[i] - b * s[i];
      x1[i] = a * s[i] + b * c[i];
    }
  }
}

// exp(-x) with the argument clamped where Highway's Exp is valid (< 104); e^100 is +inf in
// float, so silu/sigmoid saturate to 0 exactly as with std::exp.
HWY_INLINE VF ExpNeg(DF d, VF x) { return hn::Exp(d, hn::Min(hn::Neg(x), hn::Set(d, 100.0f))); }
HWY_INLINE VF SigmoidV(DF d, VF x) {
  return hn::Div(hn::Set(d, 1.0f), hn::Add(hn::Set(d, 1.0f), ExpNeg(d, x)));
}
HWY_INLINE VF SiluV(DF d, VF x) { return hn::Div(x, hn::Add(hn::Set(d, 1.0f), ExpNeg(d, x))); }

void UnaryImpl(Unary op, const float* x, float* y, int64_t n) {
  const DF d;
  const int64_t N = hn::Lanes(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const VF v = hn::LoadU(d, x + i);
    VF r;
    switch (op) {
      case Unary::kSigmoid:
        r = SigmoidV(d, v);
        break;
      case Unary::kSilu:
        r = SiluV(d, v);
        break;
      default: {
        const VF sp = hn::Log1p(d, hn::Exp(d, hn::Min(v, hn::Set(d, 20.0f))));
        r = hn::IfThenElse(hn::Gt(v, hn::Set(d, 20.0f)), v, sp);
      }
    }
    hn::StoreU(r, d, y + i);
  }
  for (; i < n; ++i) {
    const float v = x[i];
    switch (op) {
      case Unary::kSigmoid:
        y[i] = 1.0f / (1.0f + std::exp(-v));
        break;
      case Unary::kSilu:
        y[i] = v / (1.0f + std::exp(-v));
        break;
      default:
        y[i] = v > 20.0f ? v : std::log1p(std::exp(v));
    }
  }
}

// kAxpy: y += s * a; kScale: y = s * a (b unused).
void BinaryImpl(Binary op, const float* a, const float* b, float s, float* y, int64_t n) {
  const DF d;
  const int64_t N = hn::Lanes(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const VF va = hn::LoadU(d, a + i);
    VF r;
    switch (op) {
      case Binary::kSiluMul:
        r = hn::Mul(SiluV(d, va), hn::LoadU(d, b + i));
        break;
      case Binary::kAdd:
        r = hn::Add(va, hn::LoadU(d, b + i));
        break;
      case Binary::kMul:
        r = hn::Mul(va, hn::LoadU(d, b + i));
        break;
      case Binary::kScale:
        r = hn::Mul(va, hn::Set(d, s));
        break;
      default:
        r = hn::MulAdd(hn::Set(d, s), va, hn::LoadU(d, y + i));
    }
    hn::StoreU(r, d, y + i);
  }
  for (; i < n; ++i) {
    switch (op) {
      case Binary::kSiluMul:
        y[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
        break;
      case Binary::kAdd:
        y[i] = a[i] + b[i];
        break;
      case Binary::kMul:
        y[i] = a[i] * b[i];
        break;
      case Binary::kScale:
        y[i] = a[i] * s;
        break;
      default:
        y[i] += s * a[i];
    }
  }
}

// y = sum_j w[j] * x[j] for j < n_terms, each term one multiply-add onto the running sum from
// zero: per lane the operations of zeroing y and AddScaled once per term, in one pass over y.
void WeightedSumImpl(const float* const* x, const float* w, int n_terms, float* y, int64_t n) {
  const DF d;
  const int64_t N = hn::Lanes(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    VF acc = hn::Zero(d);
    for (int j = 0; j < n_terms; ++j)
      acc = hn::MulAdd(hn::Set(d, w[j]), hn::LoadU(d, x[j] + i), acc);
    hn::StoreU(acc, d, y + i);
  }
  for (; i < n; ++i) {
    float acc = 0.0f;
    for (int j = 0; j < n_terms; ++j) acc += w[j] * x[j][i];
    y[i] = acc;
  }
}

// Channels [c0, c1) of the causal conv1d: X rows come from the state (r < K-1) or x.
void Conv1dChannels(const Conv1dArgs& a, int64_t c0, int64_t c1) {
  const DF d;
  const int64_t N = hn::Lanes(d);
  const int K = a.K;
  constexpr int64_t kBlock = 64;  // channels per pass: the transposed weights live on the stack
  alignas(64) float wt[16][kBlock];
  alignas(64) float keep[15][kBlock];
  for (int64_t cb = c0; cb < c1; cb += kBlock) {
    const int64_t nc = std::min(kBlock, c1 - cb);
    // Tap j's weights of this channel block: from the tap-major copy, or transposed here.
    const float* taps[16];
    for (int j = 0; j < K; ++j) {
      if (a.w_taps) {
        taps[j] = a.w_taps + j * a.C + cb;
      } else {
        for (int64_t c = 0; c < nc; ++c) wt[j][c] = a.w[(cb + c) * K + j];
        taps[j] = wt[j];
      }
    }
    auto xrow = [&](int64_t r) -> const float* {
      return r < K - 1 ? a.state + r * a.C + cb : a.x + (r - (K - 1)) * a.ldx + cb;
    };
    if (a.update_state) {  // the last K-1 rows of X, read before the outputs are written
      for (int r = 0; r < K - 1; ++r) std::copy(xrow(a.T + r), xrow(a.T + r) + nc, keep[r]);
    }
    for (int64_t t = 0; t < a.T; ++t) {
      float* y = a.y + t * a.ldy + cb;
      int64_t c = 0;
      for (; c + N <= nc; c += N) {
        VF acc = hn::Zero(d);
        for (int j = 0; j < K; ++j)
          acc = hn::MulAdd(hn::LoadU(d, xrow(t + j) + c), hn::LoadU(d, taps[j] + c), acc);
        hn::StoreU(SiluV(d, acc), d, y + c);
      }
      for (; c < nc; ++c) {
        float acc = 0.0f;
        for (int j = 0; j < K; ++j) acc += xrow(t + j)[c] * taps[j][c];
        y[c] = acc / (1.0f + std::exp(-acc));
      }
    }
    if (a.update_state) {
      for (int r = 0; r < K - 1; ++r) std::copy(keep[r], keep[r] + nc, a.state + r * a.C + cb);
    }
  }
}

}  // namespace
}  // namespace crossword::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace crossword::kernels {
HWY_EXPORT(RmsNormImpl);
HWY_EXPORT(L2NormImpl);
HWY_EXPORT(SoftmaxImpl);
HWY_EXPORT(ArgMaxImpl);
HWY_EXPORT(SoftmaxProbImpl);
HWY_EXPORT(SoftmaxProbAboveImpl);
HWY_EXPORT(RopeNeoxImpl);
HWY_EXPORT(UnaryImpl);
HWY_EXPORT(BinaryImpl);
HWY_EXPORT(WeightedSumImpl);
HWY_EXPORT(Conv1dChannels);

using detail::Binary;
using detail::Unary;

void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  HWY_DYNAMIC_DISPATCH(RmsNormImpl)(x, w, y, n, eps);
}
void L2Norm(float* x, int64_t n, float eps) { HWY_DYNAMIC_DISPATCH(L2NormImpl)(x, n, eps); }
void Softmax(float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(SoftmaxImpl)(x, n); }
int64_t ArgMax(const float* x, int64_t n, int64_t exclude) {
  return HWY_DYNAMIC_DISPATCH(ArgMaxImpl)(x, n, exclude);
}
float SoftmaxProb(const float* x, int64_t n, int64_t i) {
  Check(i >= 0 && i < n, "SoftmaxProb: index {} outside [0, {})", i, n);
  return HWY_DYNAMIC_DISPATCH(SoftmaxProbImpl)(x, n, i);
}
float SoftmaxProbAbove(const float* x, int64_t n, int64_t i, float below) {
  return SoftmaxProbAbove(x, n, i, below, NAN);  // the maximum unknown: the kernel finds it
}
float SoftmaxProbAbove(const float* x, int64_t n, int64_t i, float below, float max) {
  Check(i >= 0 && i < n, "SoftmaxProbAbove: index {} outside [0, {})", i, n);
  return HWY_DYNAMIC_DISPATCH(SoftmaxProbAboveImpl)(x, n, i, below, max);
}

void RopeNeox(float* x, int64_t n_head, int64_t head_dim, int64_t head_stride, int n_rot,
              int64_t pos, float freq_base) {
  Check(n_rot > 0 && n_rot % 2 == 0 && n_rot <= head_dim && n_rot <= 512,
        "RopeNeox: n_rot {} must be even, positive, <= head_dim {} and <= 512", n_rot, head_dim);
  HWY_DYNAMIC_DISPATCH(RopeNeoxImpl)(x, n_head, head_stride, n_rot, pos, freq_base);
}

void SiluMul(const float* gate, const float* up, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(BinaryImpl)(Binary::kSiluMul, gate, up, 0.0f, y, n);
}
void Add(const float* a, const float* b, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(BinaryImpl)(Binary::kAdd, a, b, 0.0f, y, n);
}
void AddScaled(const float* x, float s, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(BinaryImpl)(Binary::kAxpy, x, nullptr, s, y, n);
}
void Mul(const float* a, const float* b, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(BinaryImpl)(Binary::kMul, a, b, 0.0f, y, n);
}
void WeightedSum(std::span<const float* const> x, std::span<const float> w, float* y, int64_t n) {
  Check(x.size() == w.size(), "WeightedSum: {} rows but {} weights", x.size(), w.size());
  HWY_DYNAMIC_DISPATCH(WeightedSumImpl)(x.data(), w.data(), static_cast<int>(x.size()), y, n);
}
void Scale(float* x, float s, int64_t n) {
  HWY_DYNAMIC_DISPATCH(BinaryImpl)(Binary::kScale, x, nullptr, s, x, n);
}
void Sigmoid(const float* x, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(UnaryImpl)(Unary::kSigmoid, x, y, n);
}
void Silu(const float* x, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(UnaryImpl)(Unary::kSilu, x, y, n);
}
void Softplus(const float* x, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(UnaryImpl)(Unary::kSoftplus, x, y, n);
}

void TopKSoftmax(const float* logits, int n_expert, int k, int32_t* ids, float* weights) {
  Check(n_expert >= 1 && n_expert <= 1024 && k >= 1 && k <= n_expert,
        "TopKSoftmax: need 1 <= k ({}) <= n_expert ({}) <= 1024", k, n_expert);
  float p[1024];
  std::copy(logits, logits + n_expert, p);
  Softmax(p, n_expert);
  // k passes of argmax (k is 8 for Clover): strict > keeps the lower id on ties.
  bool taken[1024];  // (only the n_expert used are cleared: this runs per token and layer)
  std::fill(taken, taken + n_expert, false);
  float sum = 0.0f;
  for (int i = 0; i < k; ++i) {
    int best = -1;
    for (int e = 0; e < n_expert; ++e) {
      if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
    }
    taken[best] = true;
    ids[i] = best;
    weights[i] = p[best];
    sum += p[best];
  }
  const float denom = std::max(sum, 6.103515625e-5f);
  for (int i = 0; i < k; ++i) weights[i] /= denom;
}

std::vector<float> ConvTapsMajor(std::span<const float> w, int64_t C, int K) {
  Check(C >= 1 && K >= 1 && std::cmp_equal(w.size(), C * K),
        "ConvTapsMajor: {} weights for {} channels of {} taps", w.size(), C, K);
  std::vector<float> out(w.size());
  for (int64_t c = 0; c < C; ++c) {
    for (int j = 0; j < K; ++j)
      out[static_cast<size_t>(j * C + c)] = w[static_cast<size_t>(c * K + j)];
  }
  return out;
}

void CausalConv1dSilu(const Conv1dArgs& args, ThreadPool& pool) {
  ref::CheckConv1dArgs(args);
  constexpr int64_t kPerTask = 512;
  const int64_t n_tasks = (args.C + kPerTask - 1) / kPerTask;
  pool.ParallelFor(n_tasks, args.T * args.C * args.K, [&](int64_t task, int) {
    const int64_t c0 = task * kPerTask;
    HWY_DYNAMIC_DISPATCH(Conv1dChannels)(args, c0, std::min(args.C, c0 + kPerTask));
  });
}

}  // namespace crossword::kernels
#endif  // HWY_ONCE
