// `crossword bench --passes --sweep` (bench_sweep.h): pass cost by rows against the machine's
// floors. The floors follow ../shared/parallel-decoding-notes.md sections 2-3: a T-row pass must
// read every dense matrix, the U distinct experts its rows route to in each MoE layer, the output
// head (when a row needs logits) and T embedding rows, and must do T x (dense + k experts) + R x
// head multiply-adds (R logit rows); attention, GDN and fixed per-pass overhead are left out.
#include "cli/bench_sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "base/error.h"
#include "core/quant.h"
#include "core/types.h"
#include "kernels/kernels.h"

namespace crossword::cli {
namespace {

// AR steps timed per AR sample, after one untimed step (TimeArStep).
constexpr int kArSteadySteps = 3;

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string LoadAvg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  if (!(in >> a >> b >> c)) return "unknown";
  return a + " " + b + " " + c;
}

double Params(const kernels::Matrix& m) {
  return m.data ? static_cast<double>(m.n_in) * static_cast<double>(m.n_out) : 0.0;
}
double Bytes(const kernels::Matrix& m) {
  return m.data ? static_cast<double>(m.n_out) * static_cast<double>(m.row_bytes) : 0.0;
}

// What a pass must read and compute, from the model's shapes.
struct Shapes {
  double dense_bytes = 0, dense_params = 0;    // all layers
  double expert_bytes = 0, expert_params = 0;  // one expert (gate + up + down), mean per layer
  double head_bytes = 0, head_params = 0, embd_row_bytes = 0;
  // Per row, the last layer's row-independent part after its conv/recurrence or attention:
  // output projection, router, shared expert and k routed experts (what a skipped row saves).
  double last_out_params = 0;
  int k = 0, moe_layers = 0;
};

Shapes ShapesOf(const model::Model& m) {
  const model::Weights& w = m.weights();
  Shapes s;
  for (const model::LayerWeights& L : w.layers) {
    for (const kernels::Matrix* x : L.DenseMatrices()) {
      s.dense_bytes += Bytes(*x);
      s.dense_params += Params(*x);
    }
    for (const model::ExpertTensor* e : L.ExpertStacks()) {
      s.expert_bytes += Bytes(e->first);
      s.expert_params += Params(e->first);
    }
  }
  s.moe_layers = static_cast<int>(w.layers.size());
  s.expert_bytes /= s.moe_layers;
  s.expert_params /= s.moe_layers;
  s.head_bytes = Bytes(w.output);
  s.head_params = Params(w.output);
  s.embd_row_bytes = static_cast<double>(w.token_embd_row_bytes);
  s.k = m.hparams().n_expert_used;
  if (!w.layers.empty()) {
    const model::LayerWeights& L = w.layers.back();
    s.last_out_params = Params(L.is_recurrent() ? L.ssm_out : L.attn_output) +
                        Params(L.ffn_gate_inp) + Params(L.ffn_gate_shexp) + Params(L.ffn_up_shexp) +
                        Params(L.ffn_down_shexp);
    for (const model::ExpertTensor* e : L.ExpertStacks())
      s.last_out_params += s.k * Params(e->first);
  }
  return s;
}

// Multiply-adds per second of the int8 products on weights that stay in the caches: a 512 x 2048
// Q8_0 matrix (1.1 MB, half per thread with 2 threads; in the tile layout where this CPU has one)
// times 32 activation rows, best of 5 timings of 16 products. It is the compute roof the
// multi-row passes can reach with this build's kernels.
double Int8Rate(ThreadPool& pool) {
  constexpr int64_t kOut = 512, kIn = 2048, kRows = 32, kTimes = 16;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> row(kIn);
  const size_t row_bytes = static_cast<size_t>(*RowBytes(GgmlType::kQ8_0, kIn));
  std::vector<uint8_t> w(row_bytes * kOut);
  for (int64_t o = 0; o < kOut; ++o) {
    for (float& v : row) v = nd(rng);
    QuantizeRow(GgmlType::kQ8_0, row.data(), w.data() + o * row_bytes, kIn);
  }
  kernels::Matrix m{GgmlType::kQ8_0, kIn, kOut, w.data(), row_bytes, nullptr};
  std::vector<uint8_t> packed;
  if (const size_t pb = kernels::RepackedBytes(m); pb > 0) {
    packed.resize(pb + 64);
    void* p = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
    kernels::Repack(m, p);
    m.packed = p;
  }
  std::vector<float> x(kRows * kIn), y(kRows * kOut);
  for (float& v : x) v = nd(rng);
  kernels::Activations a;
  a.Reserve(kRows, kIn);
  kernels::PrepareActivations(GgmlType::kQ8_0, x.data(), kRows, kIn, kIn, a, pool);
  kernels::MatMul(m, a, y.data(), kOut, pool);  // warm the caches
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kTimes; ++i) kernels::MatMul(m, a, y.data(), kOut, pool);
    best = std::max(best,
                    static_cast<double>(kOut * kIn * kRows * kTimes) / Seconds(t0, Clock::now()));
  }
  return best;
}

// Read bandwidth: the file's largest tensor when it is big enough to leave the caches (that is
// what the passes stream), otherwise 512 MiB of fresh memory.
double Bandwidth(const model::Model& m, ThreadPool& pool, std::string* what) {
  const gguf::TensorInfo* big = nullptr;
  for (const gguf::TensorInfo& t : m.file().tensors()) {
    if (!big || t.nbytes > big->nbytes) big = &t;
  }
  if (big && big->nbytes >= (size_t{256} << 20)) {
    *what = big->name + " of the file";
    return ReadBandwidthOf(big->data, big->nbytes, pool);
  }
  std::vector<uint64_t> buf((size_t{512} << 20) / 8);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = i;
  *what = "512 MiB of memory";
  return ReadBandwidthOf(buf.data(), buf.size() * 8, pool);
}

struct PassRow {
  std::string test;
  int64_t rows = 0;       // T
  int64_t head_rows = 0;  // R
  double experts = 0;     // U per layer
  bool counted = false;   // the executor counted experts and head rows (the CPU's does)
  std::vector<double> ms;
  int64_t last_rows = -1;  // rows of the last layer's row-independent part (-1: not counted)
};

}  // namespace

double ReadBandwidthOf(const void* data, size_t bytes, ThreadPool& pool) {
  const size_t words = bytes / 8;
  constexpr size_t kTaskWords = size_t{1} << 19;  // 4 MiB per task
  const int64_t n_tasks = static_cast<int64_t>((words + kTaskWords - 1) / kTaskWords);
  std::vector<uint64_t> sink(static_cast<size_t>(pool.size()) * 8, 0);
  double best = 0.0;
  for (int pass = 0; pass < 5; ++pass) {
    const auto t0 = Clock::now();
    pool.ParallelFor(n_tasks, [&](int64_t task, int thread) {
      const auto* p = static_cast<const uint64_t*>(data);
      const size_t a = static_cast<size_t>(task) * kTaskWords, b = std::min(words, a + kTaskWords);
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      size_t i = a;
      for (; i + 4 <= b; i += 4) {
        s0 += p[i];
        s1 ^= p[i + 1];
        s2 += p[i + 2];
        s3 ^= p[i + 3];
      }
      for (; i < b; ++i) s0 += p[i];
      sink[static_cast<size_t>(thread) * 8] += s0 + s1 + s2 + s3;  // one cache line per thread
    });
    best = std::max(best, static_cast<double>(words * 8) / Seconds(t0, Clock::now()) / 1e9);
  }
  uint64_t all = 0;
  for (uint64_t v : sink) all ^= v;
  if (all == 0x5eed) std::fputc(' ', stderr);  // keeps the sums observable
  return best;
}

double TimeArStep(const model::Executor& x, model::ForwardContext& ctx, model::SequenceState& st,
                  model::StateSnapshot& snap, std::span<const int32_t> tokens) {
  if (tokens.size() < 2) Fail("TimeArStep: needs at least 2 tokens (got {})", tokens.size());
  st.Restore(snap);
  st.SaveSnapshot(snap);  // renewed: a snapshot survives only the last 4096 KV rewrites
  double total = 0;
  for (size_t k = 0; k < tokens.size(); ++k) {
    model::SequenceInput in{&st, tokens.subspan(k, 1), model::PassKind::kCausal,
                            model::LogitRows::kLast};
    const auto t0 = Clock::now();
    x.Forward({&in, 1}, ctx);
    if (k > 0) total += 1e3 * Seconds(t0, Clock::now());
  }
  return total / static_cast<double>(tokens.size() - 1);
}

void RunPassSweep(const engine::Engine& e, std::span<const int32_t> prompt, const SweepOptions& o,
                  FILE* out, FILE* info) {
  const model::Model& m = e.model();
  const model::Executor& x = e.executor();
  // The machine figures run on a pool as wide as the executor's (idle meanwhile).
  ThreadPool pool(x.host_threads());
  int64_t max_t = 1;
  // The AR step is every ratio's unit, so it is timed whether or not the list names 1.
  // Each row count once, in the order given.
  std::vector<int64_t> sweep_rows;
  for (int64_t t : o.rows) {
    if (std::find(sweep_rows.begin(), sweep_rows.end(), t) == sweep_rows.end()) {
      sweep_rows.push_back(t);
    }
  }
  if (std::find(sweep_rows.begin(), sweep_rows.end(), 1) == sweep_rows.end()) {
    sweep_rows.insert(sweep_rows.begin(), 1);
  }
  for (int64_t t : sweep_rows) {
    if (t < 1) Fail("bench --sweep: rows must be >= 1 (got {})", t);
    max_t = std::max(max_t, t);
  }
  const int64_t n_vocab = m.hparams().n_vocab;
  const int32_t mask = e.tokenizer().special().mask.value_or(-1);
  std::mt19937 rng(99);
  std::vector<int32_t> block(static_cast<size_t>(max_t)), masked(static_cast<size_t>(max_t));
  for (int32_t& t : block) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
  // The AR steps' own tokens, one per step (the block may be shorter than the steps).
  std::vector<int32_t> ar_tokens(kArSteadySteps + 1);
  for (int32_t& t : ar_tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
  masked.assign(block.size(), mask >= 0 ? mask : block[1 % block.size()]);
  masked[0] = block[0];
  std::vector<uint8_t> need(2 * block.size(), 1);
  // Fused passes (docs/decoding.md): the block, then the next block [seed, MASK...] as the tail.
  std::vector<int32_t> fused;

  model::ContextOptions co;
  co.max_tokens = std::max<int64_t>(static_cast<int64_t>(prompt.size()), 2 * max_t);
  co.max_logit_rows = 2 * max_t;
  std::unique_ptr<model::ForwardContext> ctx_owner = x.NewContext(co);
  model::ForwardContext& ctx = *ctx_owner;
  model::StateOptions so;
  so.n_ctx = static_cast<int64_t>(prompt.size()) + 2 * max_t + 8;
  so.kv_type = GgmlType::kF16;
  so.max_record_tokens = max_t;
  auto st = x.NewState(so);
  if (!prompt.empty()) {
    model::SequenceInput in{st.get(), prompt, model::PassKind::kCausal, model::LogitRows::kNone};
    x.Forward({&in, 1}, ctx);
  }
  model::StateSnapshot snap;
  st->SaveSnapshot(snap);

  const uint64_t skip_ffn = x.skips_ffn() ? e.DefaultDecodeParams().draft_skip_ffn : 0;
  std::vector<PassRow> rows;
  for (int64_t t : sweep_rows) {
    if (t == 1) {
      rows.push_back({"ar step", 1, 1, 0, false, {}, -1});
    } else {
      const std::string n = std::to_string(t);
      rows.push_back({"verify" + n, t, t, 0, false, {}, -1});
      rows.push_back({"denoise" + n, t, t - 1, 0, false, {}, -1});
      // A spec draft pass as the model's drafts run it: denoise{t} skipping the FFN blocks of
      // the model's default draft layers (DecodeParams::draft_skip_ffn; the floors assume every
      // layer, so none are given).
      if (skip_ffn != 0) rows.push_back({"draft" + n, t, t - 1, 0, false, {}, -1});
      if (x.fuses_passes()) {
        // Diffusion's commit pass (its last row seeds the next block) and the fused pair of each
        // mode: head rows of the seed row and the whole tail, or of every row.
        rows.push_back({"commit" + n, t, 1, 0, false, {}, -1});
        rows.push_back({"fused commit" + n + "+denoise" + n, 2 * t, t + 1, 0, false, {}, -1});
        rows.push_back({"fused verify" + n + "+draft" + n, 2 * t, 2 * t, 0, false, {}, -1});
      }
    }
  }
  // A mid-block diffusion pass of the longest block (every other slot committed): logits for the
  // masked slots only (what decoding asks for) against every row (the head rows lever).
  if (max_t >= 4) {
    const std::string b = std::to_string(max_t);
    rows.push_back({"denoise" + b + " half masked, all rows", max_t, max_t, 0, false, {}, -1});
    rows.push_back({"denoise" + b + " half masked", max_t, 0, 0, false, {}, -1});
  }
  std::vector<int32_t> half(masked);
  std::vector<uint8_t> half_need(half.size(), 0);
  for (size_t j = 1; j < half.size(); j += 2) half[j] = block[j];  // odd slots committed
  for (size_t j = 0; j + 1 < half.size(); ++j) half_need[j] = half[j + 1] == masked[1];
  // One timed forward pass; notes the experts per MoE layer and the head rows it used.
  auto note_counters = [&](PassRow& r) {
    r.experts = static_cast<double>(ctx.experts_used()) / std::max(1, ctx.moe_layers());
    r.head_rows = ctx.head_rows();
    r.last_rows = ctx.last_layer_rows();
    r.counted = ctx.moe_layers() > 0 || ctx.head_rows() > 0;
  };
  auto timed = [&](model::SequenceInput& in, PassRow& r) {
    const auto t0 = Clock::now();
    x.Forward({&in, 1}, ctx);
    const double ms = 1e3 * Seconds(t0, Clock::now());
    note_counters(r);
    return ms;
  };
  auto run = [&](PassRow& r) {
    st->Restore(snap);
    st->SaveSnapshot(snap);  // renewed: a snapshot survives only the last 4096 KV rewrites
    if (r.test.starts_with("commit") || r.test.starts_with("fused")) {
      const int64_t t = r.test.starts_with("fused") ? r.rows / 2 : r.rows;
      fused.assign(block.begin(), block.begin() + t);
      model::SequenceInput in{st.get(), fused, model::PassKind::kCausal, model::LogitRows::kLast};
      if (r.test.starts_with("fused")) {
        fused.insert(fused.end(), masked.begin(), masked.begin() + t);
        in.tokens = fused;
        in.logits = model::LogitRows::kAll;
        in.denoise_tail = static_cast<int32_t>(t);
        if (r.test.starts_with("fused commit")) {
          std::fill(need.begin(), need.end(), 1);
          std::fill(need.begin(), need.begin() + t - 1, 0);
          in.need_rows = std::span<const uint8_t>(need).first(static_cast<size_t>(2 * t));
        } else {
          in.record = true;
        }
      }
      return timed(in, r);
    }
    const bool draft = r.test.starts_with("draft");
    const bool denoise = draft || r.test.starts_with("denoise");
    const bool mid = r.test.find("half") != std::string::npos;
    const std::span<const int32_t> toks(mid       ? half.data()
                                        : denoise ? masked.data()
                                                  : block.data(),
                                        static_cast<size_t>(r.rows));
    model::SequenceInput in{st.get(), toks, model::PassKind::kCausal, model::LogitRows::kAll};
    if (r.rows == 1) {
      in.logits = model::LogitRows::kLast;
    } else if (denoise) {
      in.kind = model::PassKind::kDenoise;
      std::fill(need.begin(), need.end(), 1);
      need[static_cast<size_t>(r.rows - 1)] = 0;  // the last row predicts no slot of the block
      in.need_rows = std::span<const uint8_t>(need).first(static_cast<size_t>(r.rows));
      if (mid && r.head_rows == r.rows) in.need_rows = {};
      if (mid && r.head_rows != r.rows) in.need_rows = half_need;
      if (draft) in.skip_ffn_layers = skip_ffn;
    } else {
      in.record = true;
    }
    return timed(in, r);
  };
  // The AR step (TimeArStep says how it is timed).
  auto run_ar = [&](PassRow& r) {
    const double ms = TimeArStep(x, ctx, *st, snap, ar_tokens);
    note_counters(r);
    return ms;
  };
  for (int i = 0; i < o.warmup + o.reps; ++i) {
    for (PassRow& r : rows) {
      const double ms = r.rows == 1 ? run_ar(r) : run(r);
      if (i >= o.warmup) r.ms.push_back(ms);
    }
  }

  const Shapes s = ShapesOf(m);
  std::string bw_what;
  const double bw = Bandwidth(m, pool, &bw_what);  // GB/s
  const double rate = Int8Rate(pool);              // multiply-adds per second
  // The compute floor is the instruction's peak where the CPU has one (the kernels' own
  // cache-resident rate is below it, so a floor at that rate would excuse their overheads).
  const double peak = kernels::Int8PeakRate(pool);
  const double roof = peak > 0 ? peak : rate;
  std::fprintf(info,
               "sweep: %d threads, context %zu tokens; read bandwidth %.1f GB/s (best of 5 reads "
               "of %s); int8 peak %s G multiply-adds/s (vpdpbusd zmm, 16 chains per thread, best "
               "of 5), int8 rate %.1f G multiply-adds/s (this build's kernel, cache-resident Q8_0 "
               "512x2048 x 32 rows, best of 5); compute floors at the %s; load average %s\n",
               pool.size(), prompt.size(), bw, bw_what.c_str(),
               peak > 0 ? fmt::format("{:.1f}", peak / 1e9).c_str() : "n/a", rate / 1e9,
               peak > 0 ? "peak" : "rate", LoadAvg().c_str());
  double ar_ms = 0;
  for (const PassRow& r : rows) {
    if (r.rows == 1) ar_ms = MedianOf(r.ms);
  }
  // The floors are this host's bandwidth and int8 rate, so they bound only the CPU executor's
  // passes; and bytes and multiply-adds need the experts and head rows the executor counted.
  const bool host = x.name() == "cpu";
  if (!host) {
    std::fprintf(info,
                 "sweep: the floors are the host CPU's, not the %s device's: not applied to its "
                 "passes (n/a)\n",
                 std::string(x.name()).c_str());
  }
  if (!o.json) {
    std::fprintf(
        out,
        "\n| pass | rows T | head rows | experts/layer U | median ms | x AR step | MB read | "
        "G mult-adds | bytes floor ms | compute floor ms | x floor |\n");
    std::fprintf(out,
                 "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  }
  for (const PassRow& r : rows) {
    const double T = static_cast<double>(r.rows), R = static_cast<double>(r.head_rows);
    const double bytes = s.dense_bytes + r.experts * s.moe_layers * s.expert_bytes +
                         (R > 0 ? s.head_bytes : 0) + T * s.embd_row_bytes;
    // Rows the last layer skipped (their output feeds nothing) do not run its output part.
    const double skipped = r.last_rows >= 0 ? T - static_cast<double>(r.last_rows) : 0;
    const double macs = T * (s.dense_params + s.k * s.moe_layers * s.expert_params) -
                        skipped * s.last_out_params + R * s.head_params;
    const double bytes_ms = bw > 0 ? 1e3 * bytes / (bw * 1e9) : 0;
    const double compute_ms = 1e3 * macs / roof;
    const double floor_ms = std::max(bytes_ms, compute_ms);
    const double med = MedianOf(r.ms);
    // A draft row's bytes and multiply-adds (and so its floors) are not modelled: the model
    // counts every layer's FFN.
    const bool modelled = r.counted && !r.test.starts_with("draft");
    const bool floors = host && modelled;
    if (o.json) {
      nlohmann::ordered_json j = {{"model", o.model_name},
                                  {"device", x.name()},
                                  {"threads", pool.size()},
                                  {"test", r.test},
                                  {"rows", r.rows},
                                  {"head_rows", nullptr},
                                  {"experts_per_layer", nullptr},
                                  {"median_ms", med},
                                  {"samples_ms", r.ms},
                                  {"x_ar_step", med / ar_ms},
                                  {"bytes", nullptr},
                                  {"multiply_adds", nullptr},
                                  {"bytes_floor_ms", nullptr},
                                  {"compute_floor_ms", nullptr},
                                  {"x_floor", nullptr},
                                  {"read_gbps", bw},
                                  {"int8_gmacs", rate / 1e9},
                                  {"int8_peak_gmacs", nullptr}};
      if (peak > 0) j["int8_peak_gmacs"] = peak / 1e9;
      if (r.counted) {
        j["head_rows"] = r.head_rows;
        if (r.last_rows >= 0) j["last_layer_rows"] = r.last_rows;
        j["experts_per_layer"] = r.experts;
      }
      if (modelled) {
        j["bytes"] = bytes;
        j["multiply_adds"] = macs;
      }
      if (floors) {
        j["bytes_floor_ms"] = bytes_ms;
        j["compute_floor_ms"] = compute_ms;
        j["x_floor"] = med / floor_ms;
      }
      std::fprintf(out, "%s\n", j.dump().c_str());
    } else if (!floors) {
      auto or_na = [](bool known, const std::string& v) { return known ? v : std::string("n/a"); };
      std::fprintf(out, "| %s | %lld | %s | %s | %.3f | %.2f | %s | %s | n/a | n/a | n/a |\n",
                   r.test.c_str(), static_cast<long long>(r.rows),
                   or_na(r.counted, std::to_string(r.head_rows)).c_str(),
                   or_na(r.counted, fmt::format("{:.1f}", r.experts)).c_str(), med, med / ar_ms,
                   or_na(modelled, fmt::format("{:.1f}", bytes / 1e6)).c_str(),
                   or_na(modelled, fmt::format("{:.3f}", macs / 1e9)).c_str());
    } else {
      std::fprintf(out,
                   "| %s | %lld | %lld | %.1f | %.3f | %.2f | %.1f | %.3f | %.3f | %.3f | %.2f |\n",
                   r.test.c_str(), static_cast<long long>(r.rows),
                   static_cast<long long>(r.head_rows), r.experts, med, med / ar_ms, bytes / 1e6,
                   macs / 1e9, bytes_ms, compute_ms, med / floor_ms);
    }
  }
  if (!o.json) std::fprintf(out, "\n");  // the table ends (a line right after it joins it)
  std::fflush(out);
}

}  // namespace crossword::cli
