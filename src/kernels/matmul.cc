// MatMul: products of GGUF weight matrices with prepared activation rows, one parallel region
// for a batch of jobs. Portable Highway code for every target; the AVX3_DL target hands the
// integer and BF16 types to the VNNI / vdpbf16ps tiles in vnni_kernels.cc.
// clang-format off
#include "kernels/hwy_config.h"  // must precede every Highway header
// clang-format on

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "base/error.h"
#include "base/fp16.h"
#include "core/quant_blocks.h"
#include "kernels/kernels.h"
#include "kernels/ref.h"
#include "kernels/vnni_kernels.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace crossword::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {  // per-target helpers stay private to this file

// ------------------------------------------------------------------ float weights (F32/F16/BF16)

template <class D>
HWY_INLINE hn::Vec<D> LoadF(D d, const float* p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadF(D d, const hwy::float16_t* p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::float16_t, D>(), p));
}
template <class D>
HWY_INLINE hn::Vec<D> LoadF(D d, const hwy::bfloat16_t* p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::bfloat16_t, D>(), p));
}
HWY_INLINE float ToF(float v) { return v; }
HWY_INLINE float ToF(hwy::float16_t v) {
  uint16_t bits;
  std::memcpy(&bits, &v, 2);
  return F16ToF32(bits);
}
HWY_INLINE float ToF(hwy::bfloat16_t v) { return BF16ToF32(v.bits); }

// out[r] = sum_k w[k] * x[r][k] for R activation rows sharing each weight load.
template <int R, class WT, class XT>
HWY_INLINE void DotFloatRows(const WT* HWY_RESTRICT w, const XT* const* x, int64_t n, float* out) {
  const hn::ScalableTag<float> df;
  const int64_t N = hn::Lanes(df);
  hn::Vec<decltype(df)> a0[R], a1[R];
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = hn::Zero(df);
  int64_t k = 0;
  for (; k + 2 * N <= n; k += 2 * N) {
    const auto w0 = LoadF(df, w + k);
    const auto w1 = LoadF(df, w + k + N);
    for (int r = 0; r < R; ++r) {
      a0[r] = hn::MulAdd(w0, LoadF(df, x[r] + k), a0[r]);
      a1[r] = hn::MulAdd(w1, LoadF(df, x[r] + k + N), a1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0[r], a1[r])));
    for (int64_t j = k; j < n; ++j) s += ToF(w[j]) * ToF(x[r][j]);
    out[r] = s;
  }
}

// Half-precision activations are widened to f32 once per task (exact) when they fit this
// stack buffer, instead of once per output row.
constexpr int64_t kMaxWidenedIn = 8192;

template <int R, class WT, class XT>
void FloatRows(const MatMulJob& job, int64_t i0, int64_t o0, int64_t o1) {
  const XT* x[R];
  float* y[R];
  for (int r = 0; r < R; ++r) {
    const int64_t i = i0 + r;
    x[r] = reinterpret_cast<const XT*>(job.x->row(job.x_rows ? job.x_rows[i] : i));
    y[r] = job.y + (job.y_rows ? job.y_rows[i] : i) * job.ldy;
  }
  const int64_t n = job.w.n_in;
  float out[R];
  auto run = [&](const auto* const* xs) {
    for (int64_t o = o0; o < o1; ++o) {
      const auto* w = reinterpret_cast<const WT*>(static_cast<const uint8_t*>(job.w.data) +
                                                  o * job.w.row_bytes);
      DotFloatRows<R>(w, xs, n, out);
      for (int r = 0; r < R; ++r) y[r][o] = out[r];
    }
  };
  if constexpr (!std::is_same_v<XT, float>) {
    if (n <= kMaxWidenedIn && o1 - o0 > 1) {
      const hn::ScalableTag<float> df;
      const int64_t N = hn::Lanes(df);
      HWY_ALIGN float buf[R][kMaxWidenedIn];
      const float* xf[R];
      for (int r = 0; r < R; ++r) {
        int64_t k = 0;
        for (; k + N <= n; k += N) hn::Store(LoadF(df, x[r] + k), df, buf[r] + k);
        for (; k < n; ++k) buf[r][k] = ToF(x[r][k]);
        xf[r] = buf[r];
      }
      return run(xf);
    }
  }
  run(x);
}

template <class WT, class XT>
void FloatTile(const MatMulJob& job, int64_t o0, int64_t o1) {
  int64_t i = 0;
  for (; i + 4 <= job.n_rows; i += 4) FloatRows<4, WT, XT>(job, i, o0, o1);
  for (; i < job.n_rows; ++i) FloatRows<1, WT, XT>(job, i, o0, o1);
}

// ------------------------------------------------------------------ integer weights, portable

// sum_e w16[e] * x[e] over n (a multiple of the int16 lane count) elements.
HWY_INLINE int32_t DotI16I8(const int16_t* HWY_RESTRICT w16, const int8_t* HWY_RESTRICT x,
                            int64_t n) {
  const hn::ScalableTag<int16_t> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  auto s0 = hn::Zero(d32), s1 = hn::Zero(d32);
  for (int64_t i = 0; i < n; i += hn::Lanes(d16)) {
    s0 = hn::ReorderWidenMulAccumulate(d32, hn::LoadU(d16, w16 + i),
                                       hn::PromoteTo(d16, hn::LoadU(d8, x + i)), s0, s1);
  }
  return hn::GetLane(hn::SumOfLanes(d32, hn::Add(s0, s1)));
}

// Q8_0/Q4_0 row dot: per block the exact integer sum, then one float multiply-add.
float DotQ8Row(GgmlType type, const uint8_t* w, const int8_t* xq, const float* xd, int64_t nb) {
  const hn::ScalableTag<int16_t> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const hn::Repartition<float, decltype(d16)> df;
  const int64_t N = hn::Lanes(d16);  // 8, 16 or 32: divides the block of 32
  auto acc = hn::Zero(df);
  alignas(64) int8_t q[32];
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* wq;
    float dw;
    if (type == GgmlType::kQ8_0) {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(w) + b;
      wq = blk->qs;
      dw = F16ToF32(blk->d);
    } else {
      const auto* blk = reinterpret_cast<const BlockQ4_0*>(w) + b;
      for (int j = 0; j < 16; ++j) {
        q[j] = static_cast<int8_t>((blk->qs[j] & 0xF) - 8);
        q[j + 16] = static_cast<int8_t>((blk->qs[j] >> 4) - 8);
      }
      wq = q;
      dw = F16ToF32(blk->d);
    }
    auto s0 = hn::Zero(d32), s1 = hn::Zero(d32);
    for (int64_t j = 0; j < 32; j += N) {
      s0 =
          hn::ReorderWidenMulAccumulate(d32, hn::PromoteTo(d16, hn::LoadU(d8, wq + j)),
                                        hn::PromoteTo(d16, hn::LoadU(d8, xq + b * 32 + j)), s0, s1);
    }
    acc = hn::MulAdd(hn::ConvertTo(df, hn::Add(s0, s1)), hn::Set(df, dw * xd[b]), acc);
  }
  return hn::GetLane(hn::SumOfLanes(df, acc));
}

// Scale and min of Q4_K sub-block j (6-bit fields packed in 12 bytes).
HWY_INLINE void ScaleMinQ4K(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K/Q5_K/Q6_K row dot: weights times their sub-block scale as int16, exact integer sum per
// super-block, then one float multiply-add (and the Q4_K min term).
float DotKRow(GgmlType type, const uint8_t* w, const int8_t* xq, const float* xd,
              const int16_t* bsums, int64_t nsb) {
  alignas(64) int16_t w16[256];
  float acc = 0.0f;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int8_t* x = xq + sb * 256;
    if (type == GgmlType::kQ4_K || type == GgmlType::kQ5_K) {
      // Q5_K = Q4_K's header, then qh (5th bit of element 32j + l in bit j of qh[l]), then qs.
      const bool q5 = type == GgmlType::kQ5_K;
      const uint8_t* blk = w + sb * (q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K));
      const auto& hdr = *reinterpret_cast<const BlockQ4_K*>(blk);
      const uint8_t* qh = q5 ? blk + offsetof(BlockQ5_K, qh) : nullptr;
      const uint8_t* qsb = blk + (q5 ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs));
      int msum = 0;
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        ScaleMinQ4K(j, hdr.scales, &sc, &m);
        const uint8_t* qs = qsb + (j / 2) * 32;
        const int shift = (j % 2) * 4;
        for (int l = 0; l < 32; ++l) {
          const int hi = qh ? ((qh[l] >> j) & 1) << 4 : 0;
          w16[j * 32 + l] = static_cast<int16_t>(sc * (((qs[l] >> shift) & 0xF) | hi));
        }
        msum += m * (bsums[sb * 16 + 2 * j] + bsums[sb * 16 + 2 * j + 1]);
      }
      const int32_t isum = DotI16I8(w16, x, 256);
      acc += F16ToF32(hdr.d) * xd[sb] * static_cast<float>(isum) -
             F16ToF32(hdr.dmin) * xd[sb] * static_cast<float>(msum);
    } else {
      const auto& blk = reinterpret_cast<const BlockQ6_K*>(w)[sb];
      for (int h = 0; h < 2; ++h) {
        for (int l = 0; l < 32; ++l) {
          const uint8_t ql0 = blk.ql[h * 64 + l], ql1 = blk.ql[h * 64 + 32 + l];
          const uint8_t qh = blk.qh[h * 32 + l];
          const int e = h * 128 + l;
          w16[e] =
              static_cast<int16_t>(blk.scales[e / 16] * (((ql0 & 0xF) | ((qh & 3) << 4)) - 32));
          w16[e + 32] = static_cast<int16_t>(blk.scales[(e + 32) / 16] *
                                             (((ql1 & 0xF) | (((qh >> 2) & 3) << 4)) - 32));
          w16[e + 64] = static_cast<int16_t>(blk.scales[(e + 64) / 16] *
                                             (((ql0 >> 4) | (((qh >> 4) & 3) << 4)) - 32));
          w16[e + 96] = static_cast<int16_t>(blk.scales[(e + 96) / 16] *
                                             (((ql1 >> 4) | (((qh >> 6) & 3) << 4)) - 32));
        }
      }
      const int32_t isum = DotI16I8(w16, x, 256);
      acc += F16ToF32(blk.d) * xd[sb] * static_cast<float>(isum);
    }
  }
  return acc;
}

void IntTile(const MatMulJob& job, int64_t o0, int64_t o1) {
  const Activations& x = *job.x;
  const int64_t n = job.w.n_in;
  for (int64_t i = 0; i < job.n_rows; ++i) {
    const uint8_t* row = x.row(job.x_rows ? job.x_rows[i] : i);
    const auto* xq = reinterpret_cast<const int8_t*>(row);
    const auto* xd = reinterpret_cast<const float*>(row + x.scale_offset());
    const auto* xs = reinterpret_cast<const int16_t*>(row + x.sums_offset());
    float* y = job.y + (job.y_rows ? job.y_rows[i] : i) * job.ldy;
    for (int64_t o = o0; o < o1; ++o) {
      const auto* w = static_cast<const uint8_t*>(job.w.data) + o * job.w.row_bytes;
      if (job.w.type == GgmlType::kQ8_0 || job.w.type == GgmlType::kQ4_0) {
        y[o] = DotQ8Row(job.w.type, w, xq, xd, n / 32);
      } else {
        y[o] = DotKRow(job.w.type, w, xq, xd, xs, n / 256);
      }
    }
  }
}

// ------------------------------------------------------------------ tile dispatch

void MatMulTileImpl(const MatMulJob& job, int64_t o0, int64_t o1) {
  if (job.w.n_in == 0) {  // empty sums: the tiles below would never write
    for (int64_t i = 0; i < job.n_rows; ++i) {
      float* y = job.y + (job.y_rows ? job.y_rows[i] : i) * job.ldy;
      std::fill(y + o0, y + o1, 0.0f);
    }
    return;
  }
#if HWY_TARGET == HWY_AVX3_DL
  const vnni::JobRows rows{job.x, job.n_rows, job.x_rows, job.y, job.ldy, job.y_rows};
#endif
  switch (job.w.type) {
    case GgmlType::kF32:
      return FloatTile<float, float>(job, o0, o1);
    case GgmlType::kF16:
      return FloatTile<hwy::float16_t, float>(job, o0, o1);
    case GgmlType::kBF16:
#if HWY_TARGET == HWY_AVX3_DL
      if (CpuHasAvx512Bf16()) return vnni::Bf16Tile(job.w, rows, o0, o1);
#endif
      return FloatTile<hwy::bfloat16_t, hwy::bfloat16_t>(job, o0, o1);
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
#if HWY_TARGET == HWY_AVX3_DL
      return vnni::Q8Tile(job.w, rows, o0, o1);
#else
      return IntTile(job, o0, o1);
#endif
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
#if HWY_TARGET == HWY_AVX3_DL
      return vnni::KQuantTile(job.w, rows, o0, o1);
#else
      return IntTile(job, o0, o1);
#endif
    default:
      return;  // rejected by CheckMatMulJob
  }
}

int64_t TargetOfThisCode() { return HWY_TARGET; }

}  // namespace
}  // namespace crossword::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace crossword::kernels {
HWY_EXPORT(MatMulTileImpl);
HWY_EXPORT(TargetOfThisCode);

namespace {
// Output rows per task: a multiple of the 16-row VNNI tile; small enough that 2 threads balance
// on the smallest projections, large enough that a task amortizes its dispatch.
// Very tall matrices (the output head) take longer runs per task so each thread streams long
// stretches of memory and dispatch happens a few hundred times, not thousands.
constexpr int64_t kOutPerTask = 64;
constexpr int64_t kTallOut = 65536, kOutPerTallTask = 512;
// Jobs of up to 3 rows stream their weights from memory once: each task should be a long run of
// them, so tasks of up to 512 rows (a routed expert's whole 2048 -> 512 gate, 576 KB in Q4_0).
// Handing out 64-row runs (18-72 KB) to the two threads in turn ran the experts of an 8-row
// verify at 0.6x the speed (bench/kernels_bench BM_MoeExperts: U 57 one-row Q4_0 experts
// 4.95 / 5.96 ms -> 2.77 / 3.30 ms, U 8 0.70 -> 0.44-0.48 ms, 2 threads, AMD EPYC); while the
// call would then have fewer than kMinFewTasksPerThread tasks per thread, they halve, to 64.
constexpr int64_t kFewRows = 3, kOutPerFewTask = 512, kMinFewTasksPerThread = 4;
bool IsFewRowJob(const MatMulJob& job) {
  return job.w.n_out < kTallOut && job.n_rows > 0 && job.n_rows <= kFewRows;
}
int64_t OutPerTask(const MatMulJob& job, int64_t per_few) {
  if (job.w.n_out >= kTallOut) return kOutPerTallTask;
  return IsFewRowJob(job) ? per_few : kOutPerTask;
}
int64_t TasksOf(const MatMulJob& job, int64_t per_few) {
  const int64_t per = OutPerTask(job, per_few);
  return job.n_rows == 0 ? 0 : (job.w.n_out + per - 1) / per;
}
}  // namespace

void MatMul(std::span<const MatMulJob> jobs, ThreadPool& pool) {
  int64_t few_out = 0;
  for (const MatMulJob& job : jobs) {
    if (IsFewRowJob(job)) few_out += job.w.n_out;
  }
  int64_t per_few = kOutPerFewTask;
  while (per_few > kOutPerTask && few_out < per_few * kMinFewTasksPerThread * pool.size())
    per_few /= 2;
  // First task of each job (a MoE layer has ~500 jobs: binary search, not a scan per task).
  constexpr size_t kMaxIndexed = 1024;
  std::array<int64_t, kMaxIndexed + 1> first;
  const bool indexed = jobs.size() <= kMaxIndexed;
  int64_t n_tasks = 0, macs = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    ref::CheckMatMulJob(jobs[j], j);
    if (indexed) first[j] = n_tasks;
    n_tasks += TasksOf(jobs[j], per_few);
    macs += jobs[j].w.n_out * jobs[j].w.n_in * jobs[j].n_rows;
  }
  if (indexed) first[jobs.size()] = n_tasks;
  // On one thread every job is one task: its output tiles in one kernel call (the split gives no
  // balance there, and the embedded model's row blocks make ~60 small products per layer, each
  // split in 64-output tasks before). Every output's bits are the same for any split.
  if (macs < ThreadPool::kMinParallelWork || pool.RunsInline()) {
    for (const MatMulJob& job : jobs) {
      if (job.n_rows > 0) HWY_DYNAMIC_DISPATCH(MatMulTileImpl)(job, 0, job.w.n_out);
    }
    return;
  }
  pool.ParallelFor(n_tasks, macs, [&](int64_t task, int) {
    size_t j = 0;
    if (indexed) {
      j = static_cast<size_t>(
              std::upper_bound(first.begin(), first.begin() + jobs.size() + 1, task) -
              first.begin()) -
          1;
      task -= first[j];
    } else {
      for (;; ++j) {
        const int64_t n = TasksOf(jobs[j], per_few);
        if (task < n) break;
        task -= n;
      }
    }
    const MatMulJob& job = jobs[j];
    const int64_t per = OutPerTask(job, per_few);
    const int64_t o0 = task * per;
    HWY_DYNAMIC_DISPATCH(MatMulTileImpl)(job, o0, std::min(job.w.n_out, o0 + per));
  });
}

void MatMul(const Matrix& w, const Activations& x, float* y, int64_t ldy, ThreadPool& pool) {
  const MatMulJob job{w, &x, x.n_rows(), nullptr, y, ldy, nullptr};
  MatMul(std::span<const MatMulJob>(&job, 1), pool);
}

size_t RepackedBytes(const Matrix& w) {
#if HWY_ARCH_X86_64  // the VNNI tiles (vnni_kernels.cc) are built for x86-64 only
  if (HWY_DYNAMIC_DISPATCH(TargetOfThisCode)() != HWY_AVX3_DL) return 0;
  switch (w.type) {
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
      return vnni::Q8PackedBytes(w);
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return vnni::KQuantPackedBytes(w);
    default:
      return 0;
  }
#else
  return 0;
#endif
}

void Repack(const Matrix& w, void* out) {
  if (RepackedBytes(w) == 0) {
    Fail("Repack: no tile layout for {} weights on this CPU (check RepackedBytes first)",
         TypeName(w.type));
  }
  if (reinterpret_cast<uintptr_t>(out) % 64 != 0) Fail("Repack: output is not 64-byte aligned");
#if HWY_ARCH_X86_64
  if (w.type == GgmlType::kQ8_0 || w.type == GgmlType::kQ4_0) {
    vnni::RepackQ8(w, out);
  } else {
    vnni::RepackK(w, out);
  }
#endif
}

double Int8PeakRate(ThreadPool& pool) {
#if HWY_ARCH_X86_64
  if (HWY_DYNAMIC_DISPATCH(TargetOfThisCode)() != HWY_AVX3_DL) return 0;
  // 2^19 rounds: 537 M multiply-adds per thread, ~2.3 ms at one instruction per cycle at 3.65 GHz
  // (AMD Zen 4), long beside the pool's ~1-3 us hand-off.
  constexpr int64_t kRounds = int64_t{1} << 19, kMacsPerRound = 16 * 64;
  std::atomic<int32_t> sink{0};
  double best = 0;
  for (int rep = 0; rep < 6; ++rep) {  // the first run only wakes the threads and the clocks
    const auto t0 = std::chrono::steady_clock::now();
    pool.RunOnEachThread([&](int) { sink += vnni::DpbusdChains(kRounds); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0 && s > 0) {
      best = std::max(best, static_cast<double>(pool.size() * kRounds * kMacsPerRound) / s);
    }
  }
  return best;
#else
  (void)pool;
  return 0;
#endif
}

const char* CurrentTargetName() {
  return hwy::TargetName(HWY_DYNAMIC_DISPATCH(TargetOfThisCode)());
}

bool CpuHasAvx512Bf16() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

std::vector<int64_t> AvailableTargets() {
  // Computed once with no mock active: Highway's own list shrinks to the forced target while a
  // ForceTargetForTest is in effect, which once made later loops of a test see only that target.
  static const std::vector<int64_t> all = [] {
    hwy::SetSupportedTargetsForTest(0);
    return hwy::SupportedAndGeneratedTargets();
  }();
  return all;
}
const char* TargetName(int64_t target) { return hwy::TargetName(target); }
void ForceTargetForTest(int64_t target) { hwy::SetSupportedTargetsForTest(target); }

}  // namespace crossword::kernels
#endif  // HWY_ONCE
