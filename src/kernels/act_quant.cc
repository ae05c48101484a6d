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

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// Lane 0, 4, 8 and 12 of v in a 128-bit vector (one lane of each 128-bit block).
HWY_INLINE __m128 FirstOfBlocks(__m512 v) {
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), v));
}

// The four vectors' lane reductions in one tree (op: max or add, both exact for these operands,
// so the order changes nothing): 256-bit halves of a pair, then 128-bit blocks of the two
// pairs, then the lanes within each block. Lane 4k of the result holds vector k's reduction.
template <class Op>
HWY_INLINE __m512 Reduce4(const __m512* m, const Op& op) {
  const __m512 t01 =
      op(_mm512_shuffle_f32x4(m[0], m[1], 0x44), _mm512_shuffle_f32x4(m[0], m[1], 0xEE));
  const __m512 t23 =
      op(_mm512_shuffle_f32x4(m[2], m[3], 0x44), _mm512_shuffle_f32x4(m[2], m[3], 0xEE));
  __m512 u = op(_mm512_shuffle_f32x4(t01, t23, 0x88), _mm512_shuffle_f32x4(t01, t23, 0xDD));
  u = op(u, _mm512_permute_ps(u, 0x4E));
  return op(u, _mm512_permute_ps(u, 0xB1));
}

// RowToQ8_0 for four blocks (128 floats) at once, the same bits: the block maxima and the int
// sums as one reduction tree each instead of eight horizontal reductions; the scales of the four
// blocks as one vector (IEEE division and the hardware's round-to-nearest-even fp16 conversion
// give what the scalar code computes); the codes packed two blocks to a 64-byte store (int32 ->
// int16 -> int8 with signed saturation is the int32 -> int8 saturation of DemoteTo). With a finite
// 127/amax every product is within [-127.00002, 127.00002], so the plain conversion rounds to
// nearest even as NearestInt does (its fixups are for out-of-range values). Returns false,
// writing nothing, when the group holds a NaN (Max's NaN handling depends on operand order) or a
// block's 127/amax overflows (a subnormal maximum): such groups keep the block code's bits.
HWY_INLINE bool Q8_0Group4(const float* x, int8_t* q, float* d, int32_t* sums) {
  __m512 v[8];
  __mmask16 nan = 0;
  HWY_UNROLL(8) for (int i = 0; i < 8; ++i) {
    v[i] = _mm512_loadu_ps(x + 16 * i);
    nan |= _mm512_cmp_ps_mask(v[i], v[i], _CMP_UNORD_Q);
  }
  if (nan) return false;
  __m512 m[4];
  HWY_UNROLL(4) for (int b = 0; b < 4; ++b) {
    m[b] = _mm512_max_ps(_mm512_abs_ps(v[2 * b]), _mm512_abs_ps(v[2 * b + 1]));
  }
  const __m128 amax =
      FirstOfBlocks(Reduce4(m, [](__m512 a, __m512 b) { return _mm512_max_ps(a, b); }));
  const __m128 id =
      _mm_and_ps(_mm_div_ps(_mm_set1_ps(127.0f), amax), _mm_cmpneq_ps(amax, _mm_setzero_ps()));
  if (_mm_movemask_ps(_mm_cmpeq_ps(id, _mm_set1_ps(INFINITY)))) return false;
  _mm_storeu_ps(d, _mm_cvtph_ps(_mm_cvtps_ph(_mm_div_ps(amax, _mm_set1_ps(127.0f)),
                                             _MM_FROUND_TO_NEAREST_INT)));
  const __m512 id16 = _mm512_castps128_ps512(id);
  __m512i qi[8];
  __m512 s[4];
  HWY_UNROLL(4) for (int b = 0; b < 4; ++b) {
    const __m512 vid = _mm512_permutexvar_ps(_mm512_set1_epi32(b), id16);
    qi[2 * b] = _mm512_cvtps_epi32(_mm512_mul_ps(v[2 * b], vid));
    qi[2 * b + 1] = _mm512_cvtps_epi32(_mm512_mul_ps(v[2 * b + 1], vid));
    s[b] = _mm512_castsi512_ps(_mm512_add_epi32(qi[2 * b], qi[2 * b + 1]));
  }
  // Packing interleaves the four sources by 32-bit groups within each 128-bit lane (lane k holds
  // group k of each); the permutation puts each source's four groups back in a row.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  HWY_UNROLL(2) for (int b = 0; b < 4; b += 2) {
    const __m512i lo = _mm512_packs_epi32(qi[2 * b], qi[2 * b + 1]);
    const __m512i hi = _mm512_packs_epi32(qi[2 * b + 2], qi[2 * b + 3]);
    _mm512_storeu_si512(q + b * 32, _mm512_permutexvar_epi32(order, _mm512_packs_epi16(lo, hi)));
  }
  const __m512 sum = Reduce4(s, [](__m512 a, __m512 b) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  });
  _mm_storeu_si128(reinterpret_cast<__m128i*>(sums),
                   _mm_mullo_epi32(_mm_castps_si128(FirstOfBlocks(sum)), _mm_set1_epi32(-128)));
  return true;
}
#endif

// Q8_0 (x86 ggml form): d = amax/127 as fp16, q = nearest-even(x * 127/amax); sums[b] = -128*sum.
void RowToQ8_0(const float* x, int64_t n, int8_t* q, float* d, int32_t* sums) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<int32_t, decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const int64_t N = hn::Lanes(df);
  const int64_t nb = n / 32;
  // Blocks [b0, b1) one at a time.
  auto blocks = [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* xb = x + b * 32;
      auto vmax = hn::Zero(df);
      for (int64_t j = 0; j < 32; j += N) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + j)));
      const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      d[b] = F16ToF32(F32ToF16(amax / 127.0f));
      auto vsum = hn::Zero(di);
      for (int64_t j = 0; j < 32; j += N) {
        const auto qi = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + j), hn::Set(df, id)));
        // The sum of the stored codes (DemoteTo saturates): the same as of qi for every block
        // with a finite 127/amax; a subnormal maximum (127/amax = inf) or a NaN gives out-of-range
        // qi, whose int32 sum overflowed (undefined; such a block's fp16 scale is 0 or NaN).
        vsum = hn::Add(vsum, hn::Min(hn::Max(qi, hn::Set(di, -128)), hn::Set(di, 127)));
        hn::StoreU(hn::DemoteTo(d8, qi), d8, q + b * 32 + j);
      }
      sums[b] = -128 * hn::GetLane(hn::SumOfLanes(di, vsum));
    }
  };
  int64_t b = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  for (; b + 4 <= nb; b += 4) {
    if (!Q8_0Group4(x + b * 32, q + b * 32, d + b, sums + b)) blocks(b, b + 4);
  }
#endif
  blocks(b, nb);
}

// Q8_K (ggml quantize_row_q8_K_ref): iscale = -127/max (max = first value of largest |x|),
// q = min(127, nearest-even(iscale*x)), d = 1/iscale, bsums = sums of 16, biased = q + 128.
void RowToQ8_K(const float* x, int64_t n, int8_t* q, float* d, int16_t* bsums, uint8_t* biased) {
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
      // The first element whose |x| is amax, a vector at a time (a scalar scan with an early
      // exit was 15 % of a 32-row 2048 -> 512 Q6_K product, kernels_bench BM_MatMul).
      float max = 0.0f;
      for (int64_t j = 0; j < 256; j += N) {
        const auto v = hn::LoadU(df, xb + j);
        const intptr_t at = hn::FindFirstTrue(df, hn::Eq(hn::Abs(v), hn::Set(df, amax)));
        if (at >= 0) {
          max = xb[j + at];
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
    // q + 128 as u8: two's complement with the sign bit flipped.
    const hn::ScalableTag<uint8_t> du8;
    const hn::Repartition<int8_t, decltype(du8)> di8;
    for (int64_t j = 0; j < 256; j += static_cast<int64_t>(hn::Lanes(du8))) {
      const auto v = hn::BitCast(du8, hn::LoadU(di8, qb + j));
      hn::StoreU(hn::Xor(v, hn::Set(du8, uint8_t{0x80})), du8, biased + b * 256 + j);
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
                  reinterpret_cast<int16_t*>(row + out->sums_offset()), row + out->biased_offset());
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
