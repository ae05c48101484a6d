// crossword-vk-e2e: end-to-end speed of the Vulkan executor (AR decode and prefill tok/s) on a
// model file, or on a model synthesized as a sparse file whose weights are generated on the
// device (--synth: any depth at Clover's real widths without a 20 GB file). JSON out.
// Not part of make test. bench/gpu_check.sh runs it; docs/gpu.md has a lavapipe dry run.
//
//   crossword-vk-e2e --synth clover-35b-a3b --layers 40 --type Q4_0 --prompt 512 --decode 128
//   crossword-vk-e2e --model m.gguf --prompt 128 --decode 64 --check-cpu 8
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "backends/cpu/executor.h"
#include "backends/vulkan/executor.h"
#include "base/error.h"
#include "bench_main.h"
#include "tools/synth.h"

namespace crossword::vulkan {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int Argmax(std::span<const float> row) {
  return static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
}

// sum (a - b)^2 / sum b^2 (b: the reference).
double Nmse(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? num / den : num;
}

double Stddev(std::span<const float> v) {
  double s = 0, s2 = 0;
  for (float x : v) {
    s += x;
    s2 += static_cast<double>(x) * x;
  }
  const double n = static_cast<double>(v.size()), m = s / n;
  return std::sqrt(std::max(0.0, s2 / n - m * m));
}

// GPU time of one profiled replay by shader variant, largest first: [{name, count, us, share}].
json ProfileJson(const std::vector<ProfileSample>& samples) {
  std::map<std::string, std::pair<int, double>> by;
  double total = 0;
  for (const ProfileSample& p : samples) {
    by[p.name].first += 1;
    by[p.name].second += p.us;
    total += p.us;
  }
  std::vector<std::pair<std::string, std::pair<int, double>>> v(by.begin(), by.end());
  std::sort(v.begin(), v.end(),
            [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  json ops = json::array();
  for (const auto& [name, cu] : v) {
    ops.push_back({{"shader", name},
                   {"dispatches", cu.first},
                   {"us", cu.second},
                   {"us_per_dispatch", cu.second / cu.first},
                   {"share", total > 0 ? cu.second / total : 0.0}});
  }
  return {{"dispatches", samples.size()}, {"gpu_us", total}, {"by_shader", ops}};
}

int Main(int argc, char** argv) {
  CLI::App app{"crossword-vk-e2e: AR decode and prefill speed of the Vulkan executor (JSON)"};
  std::string model_path, synth_preset, type = "Q4_0", out_path, tmp_dir;
  int layers = 0, device = -1, reps = 3, check_cpu = 0;
  int64_t prompt = 256, decode = 64, pass_tokens = 32;
  bool validation = false, real_weights = false, profile = false;
  app.add_option("--model", model_path, "a GGUF model file");
  app.add_option("--synth", synth_preset,
                 "synthesize a sparse model of this preset (clover-35b-a3b or tiny) and "
                 "generate its weights on the device");
  app.add_option("--layers", layers, "--synth: trunk layers (0: the preset's)");
  app.add_option("--type", type, "--synth: F16, Q8_0, Q4_0 or Q4_K_M")->capture_default_str();
  app.add_flag("--real-weights", real_weights,
               "--synth: write the file with random weights (the synthesizer's) and read them "
               "from it, instead of a sparse file and weights generated on the device");
  app.add_option("--tmp", tmp_dir, "--synth: directory of the sparse file (default: temp dir)");
  app.add_option("--prompt", prompt, "prefill tokens")->capture_default_str();
  app.add_option("--decode", decode, "AR decode steps")->capture_default_str();
  app.add_option("--pass-tokens", pass_tokens, "tokens per recorded pass (prefill chunk)")
      ->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions (median)")->capture_default_str();
  app.add_option("--device", device, "Vulkan device index (default: automatic)");
  app.add_option("--check-cpu", check_cpu,
                 "weights from the file: also decode this many greedy tokens on the CPU and "
                 "compare");
  app.add_flag("--validation", validation, "run under the Khronos validation layer");
  app.add_flag("--profile", profile,
               "after the timed runs, one profiled decode step and prefill pass: GPU time per "
               "shader (timestamps after every dispatch)");
  app.add_option("--json", out_path, "write the JSON here instead of stdout");
  CLI11_PARSE(app, argc, argv);
  Check(model_path.empty() != synth_preset.empty(), "give exactly one of --model and --synth");

  const auto t_start = Clock::now();
  json doc = {{"tool", "crossword-vk-e2e"}};
  std::string path = model_path;
  if (!synth_preset.empty()) {
    tools::SynthOptions so;
    so.preset = synth_preset;
    so.layers = layers;
    so.type = type;
    so.sparse = !real_weights;
    const std::string dir =
        tmp_dir.empty() ? std::filesystem::temp_directory_path().string() : tmp_dir;
    path = dir + "/crossword-vk-e2e-" + synth_preset + "-" + type + ".gguf";
    so.output = path;
    const auto t0 = Clock::now();
    const tools::SynthSummary s = tools::Synthesize(so, Logger::Silent());
    doc["model"] = {{"synth", synth_preset},
                    {"layers", layers},
                    {"type", type},
                    {"file_bytes", s.file_size},
                    {"params", s.n_params},
                    {"weights", real_weights ? "file" : "device"},
                    {"synth_seconds", Since(t0)}};
  } else {
    doc["model"] = {{"path", model_path}};
  }
  model::LoadOptions lo;
  lo.logger = Logger(LogLevel::kWarn);
  const auto t_load = Clock::now();
  std::shared_ptr<const model::Model> m = model::Model::Load(path, lo);
  const model::Hparams& hp = m->hparams();
  doc["model"]["n_layer"] = hp.n_layer;
  doc["model"]["n_embd"] = hp.n_embd;
  doc["model"]["n_vocab"] = hp.n_vocab;

  DeviceOptions dopt;
  dopt.index = device;
  dopt.allow_cpu = true;
  dopt.validation = validation;
  dopt.logger = Logger(LogLevel::kInfo);
  std::unique_ptr<Device> dev = Device::Open(dopt);
  ExecutorOptions eo;
  eo.max_tokens = pass_tokens;
  eo.max_logit_rows = pass_tokens;
  eo.generate_weights_seed = synth_preset.empty() || real_weights ? 0 : 1;
  VulkanExecutor exec(*dev, m, eo);
  model::ContextOptions co;
  co.max_tokens = std::max<int64_t>(prompt, 1);
  co.max_logit_rows = pass_tokens;
  std::unique_ptr<model::ForwardContext> ctx = exec.NewContext(co);
  doc["load_seconds"] = Since(t_load);
  doc["weight_bytes"] = exec.weight_bytes();
  doc["device"] = {{"name", dev->info().name},
                   {"driver", dev->info().driver_name + " " + dev->info().driver_info},
                   {"device_local_bytes", dev->info().device_local_bytes}};

  model::StateOptions so;
  so.n_ctx = prompt + decode + 8;
  std::unique_ptr<model::SequenceState> st = exec.NewState(so);
  std::mt19937 rng(42);
  std::vector<int32_t> toks(static_cast<size_t>(prompt));
  for (int32_t& t : toks) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(hp.n_vocab));

  // Prefill: the prompt in chunks of pass_tokens (first run records the lists: not timed).
  std::vector<double> prefill_s;
  for (int r = 0; r <= reps; ++r) {
    st->Reset();
    const auto t0 = Clock::now();
    model::SequenceInput in{st.get(), toks, model::PassKind::kCausal, model::LogitRows::kLast};
    exec.Forward({&in, 1}, *ctx);
    if (r > 0) prefill_s.push_back(Since(t0));
  }
  const int prefill_dispatches = exec.last_dispatch_count();
  // AR decode: greedy from the prompt, one token per pass.
  std::vector<double> step_s;
  int32_t next = Argmax(ctx->logits(0));
  std::vector<int32_t> gpu_tokens;
  // The GPU's logits before each of the first check_cpu tokens (compared with the CPU's below).
  std::vector<std::vector<float>> gpu_logits;
  for (int64_t i = 0; i < decode; ++i) {
    gpu_tokens.push_back(next);
    if (i < check_cpu) {
      const std::span<const float> l = ctx->logits(0);
      gpu_logits.emplace_back(l.begin(), l.end());
    }
    const auto t0 = Clock::now();
    model::SequenceInput in{
        st.get(), {&next, 1}, model::PassKind::kCausal, model::LogitRows::kLast};
    exec.Forward({&in, 1}, *ctx);
    if (i > 0) step_s.push_back(Since(t0));  // the first step records the AR list
    next = Argmax(ctx->logits(0));
  }
  const double step = Median(step_s);
  const double pre = Median(prefill_s);
  doc["prefill"] = {{"tokens", prompt},
                    {"pass_tokens", pass_tokens},
                    {"seconds_median", pre},
                    {"tok_per_s", pre > 0 ? prompt / pre : 0.0},
                    {"dispatches_per_pass", prefill_dispatches}};
  doc["decode"] = {{"steps", decode},
                   {"ms_per_token_median", step * 1e3},
                   {"tok_per_s", step > 0 ? 1.0 / step : 0.0},
                   {"dispatches_per_token", exec.last_dispatch_count()},
                   {"barriers_per_token", exec.last_barrier_count()},
                   {"us_per_dispatch", step > 0 ? step * 1e6 / exec.last_dispatch_count() : 0.0},
                   {"ms_per_layer", step * 1e3 / std::max(1, hp.n_layer)},
                   {"weight_gb_per_s_if_all_read",
                    step > 0 ? static_cast<double>(exec.weight_bytes()) / step / 1e9 : 0.0}};
  if (check_cpu > 0 && eo.generate_weights_seed == 0) {
    auto cpu = std::make_unique<backends::cpu::CpuExecutor>(
        m, backends::cpu::CpuOptions{.logger = Logger(LogLevel::kWarn)});
    std::unique_ptr<model::ForwardContext> cctx = cpu->NewContext(co);
    auto cs = cpu->NewState(so);
    model::SequenceInput in{cs.get(), toks, model::PassKind::kCausal, model::LogitRows::kLast};
    cpu->Forward({&in, 1}, *cctx);
    // Teacher-forced: the CPU is fed the GPU's tokens, so every step compares logits of the same
    // prefix. A differing argmax is a near tie when the CPU's own margin between its pick and the
    // GPU's is within the logit error (rms of the difference); the margin is in logit units.
    int same_prefix = 0, agree = 0;
    bool diverged = false;
    double worst_nmse = 0;
    json steps = json::array();
    for (int i = 0; i < check_cpu && i < static_cast<int>(gpu_logits.size()); ++i) {
      const std::span<const float> c = cctx->logits(0);
      const std::vector<float>& g = gpu_logits[static_cast<size_t>(i)];
      const int32_t ct = Argmax(c), gt = gpu_tokens[static_cast<size_t>(i)];
      const double nmse = Nmse(g, c);
      const double rms_err =
          std::sqrt(nmse) *
          std::sqrt(static_cast<double>(std::inner_product(c.begin(), c.end(), c.begin(), 0.0) /
                                        static_cast<double>(c.size())));
      worst_nmse = std::max(worst_nmse, nmse);
      agree += ct == gt ? 1 : 0;
      diverged = diverged || ct != gt;
      if (!diverged) ++same_prefix;
      json st = {{"step", i}, {"nmse", nmse}, {"cpu_token", ct}, {"gpu_token", gt}};
      if (ct != gt) {
        st["cpu_margin"] = c[static_cast<size_t>(ct)] - c[static_cast<size_t>(gt)];
        st["logit_rms_error"] = rms_err;
        st["logit_std"] = Stddev(c);
      }
      steps.push_back(st);
      const int32_t t = gt;
      model::SequenceInput s{cs.get(), {&t, 1}, model::PassKind::kCausal, model::LogitRows::kLast};
      cpu->Forward({&s, 1}, *cctx);
    }
    doc["cpu_check"] = {
        {"tokens", check_cpu},   {"identical_prefix", same_prefix},
        {"argmax_agree", agree}, {"worst_logit_nmse", worst_nmse},
        {"steps", steps},        {"method", "CPU teacher-forced with the GPU's tokens"}};
  }
  if (profile) {
    exec.set_profile(true);
    st->Reset();
    std::vector<int32_t> chunk(toks.begin(), toks.begin() + std::min<int64_t>(pass_tokens, prompt));
    model::SequenceInput in{st.get(), chunk, model::PassKind::kCausal, model::LogitRows::kLast};
    exec.Forward({&in, 1}, *ctx);  // records the list (not timed) and replays it
    const json pre_prof = ProfileJson(exec.last_profile());
    int32_t t = Argmax(ctx->logits(0));
    for (int i = 0; i < 3; ++i) {  // the first records; the last is reported
      model::SequenceInput s{st.get(), {&t, 1}, model::PassKind::kCausal, model::LogitRows::kLast};
      exec.Forward({&s, 1}, *ctx);
    }
    doc["profile"] = {{"decode_step", ProfileJson(exec.last_profile())},
                      {"prefill_pass", pre_prof}};
    exec.set_profile(false);
  }
  doc["seconds"] = Since(t_start);
  if (!synth_preset.empty()) std::filesystem::remove(path);
  bench::WriteJson(doc, out_path);
  return 0;
}

}  // namespace
}  // namespace crossword::vulkan

int main(int argc, char** argv) {
  return crossword::bench::RunTool("crossword-vk-e2e", crossword::vulkan::Main, argc, argv);
}
