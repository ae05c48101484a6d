// Micro-benchmarks of crossword_kernels: matrix-vector (weight streaming, GB/s), matrix-matrix
// (Gop/s, 2 ops per multiply-add), and the sequence kernels at Clover-35B-A3B widths.
// Run: build/bench/kernels_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
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

// 2 MiB-aligned anonymous memory advised into transparent huge pages, as the CPU executor keeps
// its load-time tile copies (backends/cpu/repack.cc): with 4 KiB pages a 0.7 GB copy streams
// through a page walk every 4 KiB. Freed on destruction.
class HugeBuffer {
 public:
  explicit HugeBuffer(size_t bytes) : map_((bytes + 2 * kHuge - 1) / kHuge * kHuge) {
    mem_ = ::mmap(nullptr, map_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem_ == MAP_FAILED) std::abort();
    const auto addr = reinterpret_cast<uintptr_t>(mem_);
    data_ = static_cast<uint8_t*>(mem_) + (kHuge - addr % kHuge) % kHuge;
    ::madvise(data_, bytes, MADV_HUGEPAGE);
  }
  ~HugeBuffer() { ::munmap(mem_, map_); }
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  uint8_t* data() const { return data_; }

 private:
  static constexpr size_t kHuge = size_t{2} << 20;
  size_t map_;
  void* mem_;
  uint8_t* data_;
};

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
  const int64_t n_out = state.range(2)              ? 512
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
// weight. Args: type index, rows, n_in, n_out, threads, packed (1: the weight's load-time tile
// copy, as the CPU executor keeps within its memory allowance; 0: tiles repacked per call).
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
  Matrix m{type, n_in, n_out, w.data(), rb};
  std::unique_ptr<HugeBuffer> packed;
  if (state.range(5)) {
    const size_t bytes = RepackedBytes(m);
    if (bytes == 0) {
      state.SkipWithError("no tile layout for this type on this CPU");
      return;
    }
    packed = std::make_unique<HugeBuffer>(bytes);
    Repack(m, packed->data());
    m.packed = packed->data();
  }
  for (auto _ : state) {
    PrepareActivations(type, x.data(), n_rows, n_in, n_in, act, pool);
    MatMul(m, act, y.data(), n_out, pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(TypeName(type)) + " " + CurrentTargetName());
  state.counters["Gop/s"] =
      benchmark::Counter(2.0 * n_rows * n_in * n_out, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  state.counters["rows/s"] = benchmark::Counter(static_cast<double>(n_rows),
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MatMul)
    // GDN attn_qkv (2048 -> 8192) over a 512-token prompt, and one routed expert's gate
    // (2048 -> 512) over the ~16 tokens a 512-token prompt routes to it on average.
    ->ArgsProduct({{3, 4, 5, 6}, {512}, {2048}, {8192}, {1, 2}, {0}})
    ->ArgsProduct({{3, 4}, {16}, {2048}, {512}, {1, 2}, {0}})
    // A 32-row pass's largest dense product (GDN attn_qkv, 2048 -> 8192) from its load-time
    // copy: docs/pass-cost-log.md, "Twenty-sixth stop".
    ->ArgsProduct({{3, 4}, {32}, {2048}, {8192}, {1, 2}, {1}})
    ->ArgsProduct({{0, 1, 2}, {64}, {2048}, {2048}, {1}, {0}})
    // The output head (2048 -> 248,320; Q6_K in llama.cpp's Q4_0 and Q4_K_M files) for the
    // head rows of an AR step, an 8-row verify and a 32-row denoise or verify pass (issue 18),
    // with tiles repacked per call and from the load-time copy.
    ->ArgsProduct({{3, 4, 6}, {1, 8, 32}, {2048}, {248320}, {2}, {0, 1}})
    // The head's kernel alone: 512 of its rows from the load-time copy (1.4 MB for Q6_K, in L2),
    // one thread.
    ->ArgsProduct({{3, 6}, {8, 32}, {2048}, {512}, {1}, {1}})
    ->ArgsProduct({{6}, {8, 32}, {2048}, {1024}, {2}, {1}})
    // The whole Q6_K head from its copy on one thread: against the 512-output product above,
    // what streaming it from memory costs the kernel.
    ->ArgsProduct({{6}, {8, 32}, {2048}, {248320}, {1}, {1}})
    // The embedded model's products (Q8_0, 128 inputs: 4 blocks per dot product): a layer's
    // 128 -> 128 (a row block's 16 rows, a pass's 32) and its head 128 -> 4096, one thread.
    ->ArgsProduct({{3}, {16, 32}, {128}, {128, 4096}, {1}, {1}})
    ->ArgNames({"type", "rows", "n_in", "n_out", "threads", "packed"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Activation quantization alone (PrepareActivations for a Q8_0 weight): the embedded model's
// row block (16 rows of 128, 64 blocks) and a Clover-width block (16 rows of 2048), one thread.
// A third of a 16-row 128 -> 128 product's time (BM_MatMul) goes here.
void BM_QuantizeQ8_0(benchmark::State& state) {
  const int64_t n_rows = state.range(0), n_in = state.range(1);
  const auto x = MakeActs(n_rows * n_in);
  ThreadPool pool(1);
  Activations act;
  act.Reserve(n_rows, n_in);
  for (auto _ : state) {
    PrepareActivations(GgmlType::kQ8_0, x.data(), n_rows, n_in, n_in, act, pool);
    benchmark::DoNotOptimize(act.row(0));
  }
  state.SetLabel(CurrentTargetName());
  state.counters["blocks/s"] = benchmark::Counter(static_cast<double>(n_rows * n_in / 32),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_QuantizeQ8_0)
    ->Args({16, 128})
    ->Args({16, 2048})
    ->ArgNames({"rows", "n_in"})
    ->Unit(benchmark::kMicrosecond);

// The routed experts of one MoE layer at Clover widths (256 experts of gate and up 2048 -> 512
// and down 512 -> 2048; 453 MB in Q4_0, so from DRAM): U distinct experts chosen at random each
// iteration, each with `rows` activation rows, as two MatMul job lists (gate+up, then down) the
// way the CPU executor's MoE layer issues them. U = 8 is an AR step, 57 an 8-row verify with a
// random router (issue 18). GB/s counts the file's expert bytes (a Q4_0 tile copy has the same
// size, a Q8_0 one 1.06x). Args: type, U, rows, threads, packed (1: every expert's load-time tile
// copy in huge pages, as the executor keeps them).
void BM_MoeExperts(benchmark::State& state) {
  const GgmlType type = kTypes[state.range(0)];
  const int n_expert = 256, U = static_cast<int>(state.range(1));
  const int64_t rows = state.range(2), n_embd = 2048, n_ff = 512;
  const size_t rb_up = *RowBytes(type, n_embd), rb_down = *RowBytes(type, n_ff);
  const size_t up_bytes = rb_up * n_ff, down_bytes = rb_down * n_embd;
  const auto gate = MakeWeights(type, n_embd, n_ff * n_expert);
  const auto up = MakeWeights(type, n_embd, n_ff * n_expert);
  const auto down = MakeWeights(type, n_ff, n_embd * n_expert);
  const auto x = MakeActs(rows * n_embd), xf = MakeActs(U * rows * n_ff);
  std::vector<float> hg(U * rows * n_ff), hu(U * rows * n_ff), y(U * rows * n_embd);
  ThreadPool pool(static_cast<int>(state.range(3)));
  Activations act, act_ff;
  act.Reserve(rows, n_embd);
  act_ff.Reserve(U * rows, n_ff);
  PrepareActivations(type, x.data(), rows, n_embd, n_embd, act, pool);
  PrepareActivations(type, xf.data(), U * rows, n_ff, n_ff, act_ff, pool);
  std::vector<int32_t> ids(n_expert);
  for (int e = 0; e < n_expert; ++e) ids[e] = e;
  std::vector<int32_t> ff_rows(U * rows);
  for (size_t i = 0; i < ff_rows.size(); ++i) ff_rows[i] = static_cast<int32_t>(i);
  // One Matrix per expert and stack, with its tile copy when asked for.
  std::vector<Matrix> mg, mu, md;
  for (int e = 0; e < n_expert; ++e) {
    mg.push_back({type, n_embd, n_ff, gate.data() + e * up_bytes, rb_up});
    mu.push_back({type, n_embd, n_ff, up.data() + e * up_bytes, rb_up});
    md.push_back({type, n_ff, n_embd, down.data() + e * down_bytes, rb_down});
  }
  std::vector<std::unique_ptr<HugeBuffer>> copies;
  if (state.range(4)) {
    for (auto* stack : {&mg, &mu, &md}) {
      const size_t stride = (RepackedBytes(stack->front()) + 63) / 64 * 64;
      if (stride == 0) {
        state.SkipWithError("no tile layout for this type on this CPU");
        return;
      }
      copies.push_back(std::make_unique<HugeBuffer>(stride * n_expert));
      for (int e = 0; e < n_expert; ++e) {
        (*stack)[e].packed = copies.back()->data() + e * stride;
        Repack((*stack)[e], copies.back()->data() + e * stride);
      }
    }
  }
  std::mt19937 rng(3);
  std::vector<MatMulJob> jobs;
  jobs.reserve(2 * U);
  for (auto _ : state) {
    state.PauseTiming();
    std::shuffle(ids.begin(), ids.end(), rng);
    state.ResumeTiming();
    jobs.clear();
    for (int u = 0; u < U; ++u) {
      const size_t e = static_cast<size_t>(ids[u]);
      for (auto [w, out] : {std::pair{&mg, &hg}, std::pair{&mu, &hu}}) {
        jobs.push_back({.w = (*w)[e],
                        .x = &act,
                        .n_rows = rows,
                        .y = out->data() + u * rows * n_ff,
                        .ldy = n_ff});
      }
    }
    MatMul(jobs, pool);
    jobs.clear();
    for (int u = 0; u < U; ++u) {
      const size_t e = static_cast<size_t>(ids[u]);
      jobs.push_back({.w = md[e],
                      .x = &act_ff,
                      .n_rows = rows,
                      .x_rows = ff_rows.data() + u * rows,
                      .y = y.data() + u * rows * n_embd,
                      .ldy = n_embd});
    }
    MatMul(jobs, pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(TypeName(type)) + " " + CurrentTargetName());
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(U * (2 * up_bytes + down_bytes)),
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_MoeExperts)
    ->ArgsProduct({{3, 4}, {8, 57}, {1}, {2}, {0, 1}})
    ->ArgsProduct({{4}, {57}, {2}, {1, 2}, {0, 1}})
    ->ArgsProduct({{4}, {165}, {1, 2}, {2}, {0, 1}})
    ->ArgsProduct({{3}, {165}, {1, 2, 3}, {2}, {1}})
    ->ArgsProduct({{4}, {165}, {1}, {1}, {0, 1}})
    ->ArgNames({"type", "U", "rows", "threads", "packed"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Gated delta rule at Clover widths (16 k-heads, 32 v-heads, 128 x 128 state per head), or at
// the embedded model's (2 k-heads, 4 v-heads, 32 x 32) with `small`.
// Args: T, mode (1 recurrent, 2 chunked), threads.
void GatedDeltaRuleAt(benchmark::State& state, bool small) {
  const int64_t T = state.range(0);
  const int nk = small ? 2 : 16, nv = small ? 4 : 32;
  const int64_t dk = small ? 32 : 128, dv = dk;
  auto q = MakeActs(T * nk * dk), k = MakeActs(T * nk * dk), v = MakeActs(T * nv * dv);
  for (auto* x : {&q, &k}) {
    for (int64_t r = 0; r < T * nk; ++r) L2Norm(x->data() + r * dk, dk, 1e-6f);
  }
  std::vector<float> g(T * nv, -0.05f), beta(T * nv, 0.5f), st(nv * dv * dk, 0.0f);
  std::vector<float> out(T * nv * dv);
  ThreadPool pool(static_cast<int>(state.range(2)));
  GdnArgs a;
  a.T = T;
  a.n_k_heads = nk;
  a.n_v_heads = nv;
  a.dk = dk;
  a.dv = dv;
  a.q = q.data();
  a.k = k.data();
  a.ldq = a.ldk = nk * dk;
  a.v = v.data();
  a.ldv = nv * dv;
  a.g = g.data();
  a.beta = beta.data();
  a.ldg = nv;
  a.state = st.data();
  a.out = out.data();
  a.ldo = nv * dv;
  a.mode = static_cast<GdnMode>(state.range(1));
  for (auto _ : state) {
    GatedDeltaRule(a, pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(T), benchmark::Counter::kIsIterationInvariantRate);
}
void BM_GatedDeltaRule(benchmark::State& state) { GatedDeltaRuleAt(state, false); }
BENCHMARK(BM_GatedDeltaRule)
    ->ArgsProduct({{1, 64, 512}, {1, 2}, {2}})
    ->ArgNames({"T", "mode", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
void BM_GatedDeltaRuleEmbedded(benchmark::State& state) { GatedDeltaRuleAt(state, true); }
BENCHMARK(BM_GatedDeltaRuleEmbedded)
    ->ArgsProduct({{1, 32}, {1}, {1}})
    ->ArgNames({"T", "mode", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Attention, q heads interleaved with gates, F16 cache: BM_Attention at Clover widths (16 q
// heads, 2 kv heads, head_dim 256), BM_AttentionEmbedded at the embedded model's (4, 2, 32).
// Args: T, n_past, threads. T = 1 is a decode step; T = 512, n_past = 0 a prompt.
void AttentionBench(benchmark::State& state, int n_head, int n_head_kv, int64_t D) {
  const int64_t T = state.range(0), n_past = state.range(1);
  const int64_t n_kv = n_past + T;
  const auto q = MakeActs(T * n_head * 2 * D);
  std::vector<uint16_t> kv(n_kv * n_head_kv * D);
  const auto kvf = MakeActs(kv.size());
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = F32ToF16(kvf[i]);
  std::vector<float> out(T * n_head * D);
  ThreadPool pool(static_cast<int>(state.range(2)));
  AttentionArgs a;
  a.q = q.data();
  a.ldq = n_head * 2 * D;
  a.q_head_stride = 2 * D;
  a.k = a.v = kv.data();
  a.kv_type = GgmlType::kF16;
  a.ldk = a.ldv = n_head_kv * D;
  a.out = out.data();
  a.ldo = n_head * D;
  a.T = T;
  a.n_past = n_past;
  a.n_head = n_head;
  a.n_head_kv = n_head_kv;
  a.head_dim = D;
  for (auto _ : state) {
    Attention(a, pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(T), benchmark::Counter::kIsIterationInvariantRate);
}
void BM_Attention(benchmark::State& state) { AttentionBench(state, 16, 2, 256); }
void BM_AttentionEmbedded(benchmark::State& state) { AttentionBench(state, 4, 2, 32); }
BENCHMARK(BM_AttentionEmbedded)
    ->Args({1, 64, 1})
    ->Args({32, 64, 1})
    ->Args({32, 64, 2})
    ->ArgNames({"T", "n_past", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Attention)
    ->Args({1, 512, 2})
    ->Args({1, 8192, 2})
    ->Args({32, 4096, 2})
    ->Args({512, 0, 2})
    ->ArgNames({"T", "n_past", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Causal conv1d + SiLU over the 8192 GDN channels. Args: T, threads.
void BM_Conv1d(benchmark::State& state) {
  const int64_t T = state.range(0), C = 8192;
  const int K = 4;
  const auto x = MakeActs(T * C), w = MakeActs(C * K);
  std::vector<float> st((K - 1) * C, 0.0f), y(T * C);
  ThreadPool pool(static_cast<int>(state.range(1)));
  for (auto _ : state) {
    CausalConv1dSilu({x.data(), C, T, C, K, w.data(), st.data(), y.data(), C, true}, pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(T), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Conv1d)->Args({1, 1})->Args({512, 2})->ArgNames({"T", "threads"})->UseRealTime();

// Memory read bandwidth of this machine right now (plain vector sum over 540 MB per thread
// count): the ceiling the BM_MatVec GB/s figures are measured against. Args: threads.
void BM_MemRead(benchmark::State& state) {
  const size_t n = (540ull << 20) / sizeof(uint64_t);
  std::vector<uint64_t> buf(n, 1);
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::vector<uint64_t> partial(pool.size());
  for (auto _ : state) {
    pool.RunOnEachThread([&](int t) {
      const size_t per = n / pool.size();
      const uint64_t* p = buf.data() + per * t;
      // Four integer sums: 32 bytes per cycle, far above DRAM, so loads are the only limit.
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (size_t i = 0; i + 4 <= per; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
      }
      partial[t] = s0 + s1 + s2 + s3;
    });
    benchmark::DoNotOptimize(partial.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(n * sizeof(uint64_t)),
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_MemRead)
    ->Arg(1)
    ->Arg(2)
    ->ArgName("threads")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace crossword::kernels

BENCHMARK_MAIN();
