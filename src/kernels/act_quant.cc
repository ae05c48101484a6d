// PrepareActivations: converts activation rows to the format a weight type's dot product
// consumes (f16, bf16, Q8_0 with block sums, Q8_K), vectorized per Highway target.
// clang-format off
#include "kernels/hwy_config.h"  // must precede every Highway header
// clang-format on

#include <cmath>
#include <cstring>

#include "base/error.h"
#include "base/fp16.h"
#include "kernels/kernels.h"
#include "kernels/ref.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/act_quant.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace crossword::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {  // per-target helpers stay private to this file

// x -> binary16, round to nearest even (vcvtps2ph on x86 targets).
void RowToF16(const float* x, int64_t n, uint16_t* out) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int64_t N = hn::Lanes(df);
  int64_t i = 0;
#if HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::DemoteTo(dh, hn::LoadU(df, x + i)), dh,
               reinterpret_cast<hwy::float16_t*>(out + i));
  }
#else
  (void)dh;
  (void)N;
#endif
  for (; i < n; ++i) out[i] = F32ToF16(x[i]);  // portable target: exact scalar rounding
}

// x -> bfloat16, round to nearest even, NaN quieted (Highway 1.0.3's DemoteTo truncates).
void RowToBF16(const float* x, int64_t n, uint16_t* out) {
  const hn::ScalableTag<uint32_t> du;
  const hn::RebindToSigned<decltype(du)> di;
  const hn::Rebind<uint16_t, decltype(du)> du16;
  const int64_t N = hn::Lanes(du);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto bits = hn::LoadU(du, reinterpret_cast<const uint32_t*>(x + i));
    const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1));
    auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7fffu), lsb)));
    const auto is_nan = hn::Gt(hn::And(bits, hn::Set(du, 0x7fffffffu)), hn::Set(du, 0x7f800000u));
    rounded = hn::IfThenElse(is_nan, hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 64u)), rounded);
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, rounded)), du16, out + i);
  }
  for (; i < n; ++i) out[i] = F32ToBF16(x[i]);
}

// Q8_0 (x86 ggml form): d = amax/127 as fp16, q = nearest-even(x * 127/amax); sums[b] = -128*sum.
void RowToQ8_0(const float* x, int64_t n, int8_t* q, float* d, int32_t* sums) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<int32_t, decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const int64_t N = hn::Lanes(df);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    auto vmax = hn::Zero(df);
    for (int64_t j = 0; j < 32; j += N) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + j)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    d[b] = F16ToF32(F32ToF16(amax / 127.0f));
    auto vsum = hn::Zero(di);
    for (int64_t j = 0; j < 32; j += N) {
      const auto qi = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + j), hn::Set(df, id)));
      vsum = hn::Add(vsum, qi);
      hn::StoreU(hn::DemoteTo(d8, qi), d8, q + b * 32 + j);
    }
    sums[b] = -128 * hn::GetLane(hn::SumOfLanes(di, vsum));
  }
}

// Q8_K (ggml quantize_row_q8_K_ref): iscale = -127/max (max = first value of largest |x|),
// q = min(127, nearest-even(iscale*x)), d = 1/iscale, bsums = sums of 16.
void RowToQ8_K(const float* x, int64_t n, int8_t* q, float* d, int16_t* bsums) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<int32_t, decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const int64_t N = hn::Lanes(df);
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* xb = x + b * 256;
    int8_t* qb = q + b * 256;
    auto vmax = hn::Zero(df);
    for (int64_t j = 0; j < 256; j += N) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + j)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    if (amax == 0.0f) {
      d[b] = 0.0f;
      std::memset(qb, 0, 256);
    } else {
      float max = 0.0f;
      for (int j = 0; j < 256; ++j) {
        if (std::fabs(xb[j]) == amax) {
          max = xb[j];
          break;
        }
      }
      const float iscale = -127.0f / max;
      for (int64_t j = 0; j < 256; j += N) {
        auto qi = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + j), hn::Set(df, iscale)));
        qi = hn::Min(qi, hn::Set(di, 127));
        hn::StoreU(hn::DemoteTo(d8, qi), d8, qb + j);
      }
      d[b] = 1.0f / iscale;
    }
    for (int s = 0; s < 16; ++s) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += qb[s * 16 + j];
      bsums[b * 16 + s] = static_cast<int16_t>(sum);
    }
  }
}

void PrepareRowsImpl(ActFormat format, const float* x, int64_t r0, int64_t r1, int64_t ldx,
                     Activations* out) {
  const int64_t n = out->n_in();
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * ldx;
    uint8_t* row = out->mutable_row(r);
    switch (format) {
      case ActFormat::kF32:
        std::memcpy(row, xr, sizeof(float) * n);
        break;
      case ActFormat::kF16:
        RowToF16(xr, n, reinterpret_cast<uint16_t*>(row));
        break;
      case ActFormat::kBF16:
        RowToBF16(xr, n, reinterpret_cast<uint16_t*>(row));
        break;
      case ActFormat::kQ8_0:
        RowToQ8_0(xr, n, reinterpret_cast<int8_t*>(row),
                  reinterpret_cast<float*>(row + out->scale_offset()),
                  reinterpret_cast<int32_t*>(row + out->sums_offset()));
        break;
      case ActFormat::kQ8_K:
        RowToQ8_K(xr, n, reinterpret_cast<int8_t*>(row),
                  reinterpret_cast<float*>(row + out->scale_offset()),
                  reinterpret_cast<int16_t*>(row + out->sums_offset()));
        break;
    }
  }
}

}  // namespace
}  // namespace crossword::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace crossword::kernels {
HWY_EXPORT(PrepareRowsImpl);
HWY_EXPORT(RowToF16);

void F32ToF16Row(const float* x, int64_t n, uint16_t* out) {
  HWY_DYNAMIC_DISPATCH(RowToF16)(x, n, out);
}

void PrepareActivations(GgmlType weight_type, const float* x, int64_t n_rows, int64_t n_in,
                        int64_t ldx, Activations& out, ThreadPool& pool) {
  const ActFormat format = ActFormatFor(weight_type);
  out.SetShape(format, n_rows, n_in);
  Check(n_rows <= 1 || ldx >= n_in, "PrepareActivations: ldx {} < n_in {}", ldx, n_in);
  constexpr int64_t kRowsPerTask = 4;
  // Work in multiply-add units (ThreadPool::kMinParallelWork): a row element costs a scale pass
  // and a rounding pass, and handing a few rows to the other core moves them and their codes
  // between caches (on this 2-core VM a 32-row pass of the embedded model ran 1.5x slower on 2
  // threads than on 1 while each 4-row group of every product's input went to a task).
  constexpr int64_t kQuantWorkPerElement = 8;
  const int64_t n_tasks = (n_rows + kRowsPerTask - 1) / kRowsPerTask;
  pool.ParallelFor(n_tasks, n_rows * n_in * kQuantWorkPerElement, [&](int64_t task, int) {
    const int64_t r0 = task * kRowsPerTask;
    const int64_t r1 = std::min(n_rows, r0 + kRowsPerTask);
    HWY_DYNAMIC_DISPATCH(PrepareRowsImpl)(format, x, r0, r1, ldx, &out);
  });
}

}  // namespace crossword::kernels
#endif  // HWY_ONCE
