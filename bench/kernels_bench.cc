// Micro-benchmarks of crossword_kernels: matrix-vector (weight streaming, GB/s), matrix-matrix
// (Gop/s, 2 ops per multiply-add), and the sequence kernels at Clover-35B-A3B widths.
// Run: build/bench/kernels_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/fp16.h"
#include "core/quant_blocks.h"
#include "kernels/kernels.h"

namespace crossword::kernels {
namespace {

const GgmlType kTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,
                           GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K};

// Random but valid weights: random bytes with every fp16 scale field set to a small value.
std::vector<uint8_t> MakeWeights(GgmlType type, int64_t n_in, int64_t n_out) {
  const size_t rb = *RowBytes(type, n_in);
  std::vector<uint8_t> w(rb * n_out);
  std::mt19937 rng(1);
  for (size_t i = 0; i < w.size(); i += 4) {
    const uint32_t v = rng();
    std::memcpy(&w[i], &v, std::min<size_t>(4, w.size() - i));
  }
  const uint16_t small = F32ToF16(0.01f);
  for (int64_t o = 0; o < n_out; ++o) {
    uint8_t* row = w.data() + o * rb;
    switch (type) {
      case GgmlType::kF32:
        for (int64_t k = 0; k < n_in; ++k) reinterpret_cast<float*>(row)[k] = 0.01f;
        break;
      case GgmlType::kF16:
      case GgmlType::kBF16:
        for (int64_t k = 0; k < n_in; ++k) reinterpret_cast<uint16_t*>(row)[k] = 0x3c00;
        break;
      case GgmlType::kQ8_0:
      case GgmlType::kQ4_0: {
        const size_t bs = type == GgmlType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
        for (int64_t b = 0; b < n_in / 32; ++b) std::memcpy(row + b * bs, &small, 2);
        break;
      }
      case GgmlType::kQ4_K:
        for (int64_t b = 0; b < n_in / 256; ++b) {
          auto* blk = reinterpret_cast<BlockQ4_K*>(row) + b;
          blk->d = blk->dmin = small;
        }
        break;
      case GgmlType::kQ6_K:
        for (int64_t b = 0; b < n_in / 256; ++b) reinterpret_cast<BlockQ6_K*>(row)[b].d = small;
        break;
      default:
        break;
    }
  }
  return w;
}

std::vector<float> MakeActs(int64_t n) {
  std::vector<float> x(n);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& v : x) v = u(rng);
  return x;
}

// Decode: one activation row against ~512 MB of weights (the Q8_0 output head 248,320 x 2048
// is 540 MB), so every byte comes from DRAM. Args: type index, threads.
// Arg 2 (cached = 1): 512 output rows instead (~1 MB of weights, L2-resident): the kernel's
// compute throughput without DRAM.
void BM_MatVec(benchmark::State& state) {
  const GgmlType type = kTypes[state.range(0)];
  const int64_t n_in = 2048;
  const size_t rb = *RowBytes(type, n_in);
  const int64_t n_out = state.range(2) ? 512
                        : (type == GgmlType::kQ8_0) ? 248320
                                                    : (540LL << 20) / rb;
  const auto w = MakeWeights(type, n_in, n_out);
  const auto x = MakeActs(n_in);
  std::vector<float> y(n_out);
  ThreadPool pool(static_cast<int>(state.range(1)));
  Activations act;
  act.Reserve(1, n_in);
  PrepareActivations(type, x.data(), 1, n_in, n_in, act, pool);
  const Matrix m{type, n_in, n_out, w.data(), rb};
  for (auto _ : state) {
    MatMul(m, act, y.data(), n_out, pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(TypeName(type)) + " " + CurrentTargetName());
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(rb * n_out),
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_MatVec)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6}, {1, 2}, {0}})
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6}, {1}, {1}})
    ->ArgNames({"type", "threads", "cached"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Prefill: n_rows activation rows (PrepareActivations included) against an n_in x n_out
// weight. Args: type index, rows, n_in, n_out, threads.
void BM_MatMul(benchmark::State& state) {
  const GgmlType type = kTypes[state.range(0)];
  const int64_t n_rows = state.range(1), n_in = state.range(2), n_out = state.range(3);
  const size_t rb = *RowBytes(type, n_in);
  const auto w = MakeWeights(type, n_in, n_out);
  const auto x = MakeActs(n_rows * n_in);
  std::vector<float> y(n_rows * n_out);
  ThreadPool pool(static_cast<int>(state.range(4)));
  Activations act;
  act.Reserve(n_rows, n_in);
  const Matrix m{type, n_in, n_out, w.data(), rb};
  for (auto _ : state) {
    PrepareActivations(type, x.data(), n_rows, n_in, n_in, act, pool);
    MatMul(m, act, y.data(), n_out, pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(TypeName(type)) + " " + CurrentTargetName());
  state.counters["Gop/s"] = benchmark::Counter(2.0 * n_rows * n_in * n_out,
                                               benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::kIs1000);
  state.counters["rows/s"] =
      benchmark::Counter(static_cast<double>(n_rows), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MatMul)
    // GDN attn_qkv (2048 -> 8192) over a 512-token prompt, and one routed expert's gate
    // (2048 -> 512) over the ~16 tokens a 512-token prompt routes to it on average.
    ->ArgsProduct({{3, 4, 5, 6}, {512}, {2048}, {8192}, {1, 2}})
    ->ArgsProduct({{3, 4}, {16}, {2048}, {512}, {1, 2}})
    ->ArgsProduct({{1, 2}, {64}, {2048}, {2048}, {2}})
    ->ArgNames({"type", "rows", "n_in", "n_out", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace crossword::kernels

BENCHMARK_MAIN();
