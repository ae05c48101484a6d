// Side-by-side check of crossword MatMul against ggml's CPU mul_mat (llama.cpp's own kernels) on
// the same random weights, alternating runs so both see the same machine load: prints best and
// mean times, GB/s of weights, Gop/s and the largest difference of the outputs.
// Built only with -DCROSSWORD_GGML_DIR=<llama.cpp checkout with a build/ dir> (see
// bench/CMakeLists.txt). Usage: kernels_vs_ggml THREADS N_OUT ROWS TYPE_ID [N_IN] [REPS].
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "base/fp16.h"
#include "core/quant_blocks.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "kernels/kernels.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Random bytes with every fp16 scale set to 0.01 (float types: uniform values in [-1, 1]).
void FillWeights(crossword::GgmlType t, int64_t n_in, int64_t n_out, size_t rb, uint8_t* w) {
  using crossword::GgmlType;
  std::mt19937 rng(1);
  for (size_t i = 0; i < rb * n_out; ++i) w[i] = static_cast<uint8_t>(rng());
  const uint16_t small = crossword::F32ToF16(0.01f);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t o = 0; o < n_out; ++o) {
    uint8_t* row = w + o * rb;
    switch (t) {
      case GgmlType::kQ8_0:
      case GgmlType::kQ4_0: {
        const size_t bs =
            t == GgmlType::kQ8_0 ? sizeof(crossword::BlockQ8_0) : sizeof(crossword::BlockQ4_0);
        for (int64_t b = 0; b < n_in / 32; ++b) std::memcpy(row + b * bs, &small, 2);
        break;
      }
      case GgmlType::kQ4_K:
        for (int64_t b = 0; b < n_in / 256; ++b) {
          auto* blk = reinterpret_cast<crossword::BlockQ4_K*>(row) + b;
          blk->d = blk->dmin = small;
        }
        break;
      case GgmlType::kQ6_K:
        for (int64_t b = 0; b < n_in / 256; ++b) {
          reinterpret_cast<crossword::BlockQ6_K*>(row)[b].d = small;
        }
        break;
      case GgmlType::kF32:
        for (int64_t k = 0; k < n_in; ++k) reinterpret_cast<float*>(row)[k] = u(rng);
        break;
      case GgmlType::kF16:
        for (int64_t k = 0; k < n_in; ++k) {
          reinterpret_cast<uint16_t*>(row)[k] = crossword::F32ToF16(u(rng));
        }
        break;
      case GgmlType::kBF16:
        for (int64_t k = 0; k < n_in; ++k) {
          reinterpret_cast<uint16_t*>(row)[k] = crossword::F32ToBF16(u(rng));
        }
        break;
      default:
        break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace crossword;  // NOLINT(build/namespaces): a small tool
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s THREADS N_OUT ROWS TYPE_ID [N_IN] [REPS]\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  const int64_t n_out = std::atoll(argv[2]), rows = std::atoll(argv[3]);
  const auto type_id = static_cast<uint32_t>(std::atoi(argv[4]));
  const int64_t n_in = argc > 5 ? std::atoll(argv[5]) : 2048;
  const int reps = argc > 6 ? std::atoi(argv[6]) : 10;
  const auto traits = FindTypeTraits(type_id);
  const auto rbo = traits ? RowBytes(traits->type, n_in) : std::nullopt;
  if (!rbo || threads < 1 || n_out < 1 || rows < 1 || reps < 1) {
    std::fprintf(stderr, "bad arguments (type id %u, n_in %lld)\n", type_id,
                 static_cast<long long>(n_in));
    return 2;
  }
  const GgmlType t = traits->type;
  const size_t rb = *rbo;
  ggml_init_params ip = {rb * n_out + static_cast<size_t>(rows) * (n_in + n_out) * 8 + (64 << 20),
                         nullptr, false};
  ggml_context* ctx = ggml_init(ip);
  ggml_tensor* w = ggml_new_tensor_2d(ctx, static_cast<ggml_type>(type_id), n_in, n_out);
  ggml_tensor* x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_in, rows);
  FillWeights(t, n_in, n_out, rb, static_cast<uint8_t*>(w->data));
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto* xf = static_cast<float*>(x->data);
  for (int64_t i = 0; i < n_in * rows; ++i) xf[i] = u(rng);
  ggml_tensor* y = ggml_mul_mat(ctx, w, x);
  ggml_cgraph* gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, y);
  ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
  ggml_threadpool* tp = ggml_threadpool_new(&tpp);
  ggml_cplan plan = ggml_graph_plan(gf, threads, tp);
  std::vector<uint8_t> work(plan.work_size + 64);
  plan.work_data = work.data();

  ThreadPool pool(threads);
  kernels::Activations act;
  act.Reserve(rows, n_in);
  std::vector<float> yc(n_out * rows);
  const kernels::Matrix m{t, n_in, n_out, w->data, rb};
  double best_g = 1e30, best_c = 1e30, sum_g = 0, sum_c = 0;
  for (int r = 0; r < reps; ++r) {
    const double t0 = Now();
    ggml_graph_compute(gf, &plan);
    const double t1 = Now();
    kernels::PrepareActivations(t, xf, rows, n_in, n_in, act, pool);
    kernels::MatMul(m, act, yc.data(), n_out, pool);
    const double t2 = Now();
    best_g = std::min(best_g, t1 - t0);
    best_c = std::min(best_c, t2 - t1);
    sum_g += t1 - t0;
    sum_c += t2 - t1;
  }
  double max_diff = 0, max_abs = 0;
  const auto* yg = static_cast<const float*>(y->data);
  for (int64_t i = 0; i < n_out * rows; ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(yc[i]) - yg[i]));
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(yg[i])));
  }
  const double gb = rb * n_out / 1e9, gop = 2.0 * n_in * n_out * rows / 1e9;
  std::printf(
      "%s %lld x %lld, %lld rows, %d threads | ggml best %.3f ms (%.1f GB/s, %.1f Gop/s) mean "
      "%.3f | crossword (%s) best %.3f ms (%.1f GB/s, %.1f Gop/s) mean %.3f | max|diff| %.3g, "
      "max|y| %.3g\n",
      ggml_type_name(static_cast<ggml_type>(type_id)), static_cast<long long>(n_out),
      static_cast<long long>(n_in), static_cast<long long>(rows), threads, best_g * 1e3,
      gb / best_g, gop / best_g, sum_g / reps * 1e3, kernels::CurrentTargetName(), best_c * 1e3,
      gb / best_c, gop / best_c, sum_c / reps * 1e3, max_diff, max_abs);
  ggml_threadpool_free(tp);
  ggml_free(ctx);
  return 0;
}
