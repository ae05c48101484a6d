// Shared flag handling of the model-running subcommands.
#include "cli/common.h"

#include <cstdio>

#include "backends/registry.h"
#include "base/error.h"

namespace crossword::cli {

void ModelFlags::Add(CLI::App* cmd, bool model_required) {
  auto* m =
      cmd->add_option("-m,--model", model, "GGUF model file (default: the embedded tiny model)");
  if (model_required) m->required();
  cmd->add_option("-t,--threads", threads,
                  "threads (default: all cores; more than 4 per hardware thread is refused)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-c,--ctx-size", n_ctx, "context size in tokens (prompt + answer)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, kMaxCtx));
  cmd->add_flag("--no-mmap", no_mmap, "read the model into RAM instead of mapping it");
  cmd->add_flag("--mlock", mlock, "pin the model in RAM");
  cmd->add_flag(
      "--no-repack", no_repack,
      "keep no tile-layout copy of Q8_0/Q4_0 weights (multi-row passes repack on the fly)");
  cmd->add_option("--kv-type", kv_type, "KV cache type: f16 or f32")->capture_default_str();
  cmd->add_option("--log-level", log_level, "debug, info, warn, error or silent")
      ->capture_default_str();
  cmd->add_option("--device", device, backends::kDeviceFlagHelp)->capture_default_str();
  cmd->add_option("--n-gpu-layers,--gpu-layers", n_gpu_layers, backends::kGpuLayersFlagHelp)
      ->capture_default_str();
  cmd->add_flag("--list-devices", list_devices, backends::kListDevicesFlagHelp);
}

bool ModelFlags::ListDevicesIfAsked() const {
  if (!list_devices) return false;
  std::fputs(backends::DescribeDevices(MakeLogger()).c_str(), stdout);
  return true;
}

bool IsSynthFile(const engine::Engine& e) {
  const auto name = e.model().file().GetString("general.name");
  return name && name->starts_with("crossword synth");
}

Logger ModelFlags::MakeLogger() const { return Logger(ParseLogLevel(log_level)); }

engine::EngineOptions ModelFlags::ToEngineOptions() const {
  engine::EngineOptions o;
  o.model_path = model;
  o.map.use_mmap = !no_mmap;
  o.map.lock = mlock;
  o.repack = !no_repack;
  o.threads = threads;
  o.device = device;
  o.n_gpu_layers = n_gpu_layers;
  o.logger = MakeLogger();
  return o;
}

GgmlType ModelFlags::KvType() const {
  if (kv_type == "f16" || kv_type == "F16") return GgmlType::kF16;
  if (kv_type == "f32" || kv_type == "F32") return GgmlType::kF32;
  Fail("--kv-type must be f16 or f32 (got '{}')", kv_type);
}

void DecodeFlags::Add(CLI::App* cmd) {
  cmd->add_option("--mode", decoding.mode, "decoding mode: ar, diffusion or spec")
      ->capture_default_str();
  cmd->add_option("--block-size", decoding.block_size,
                  "diffusion block / spec draft length (default: from the model, 32)");
  cmd->add_option("--threshold", decoding.threshold,
                  "diffusion commit threshold (default: from the model, 0.95)");
  cmd->add_option("--draft-max", decoding.draft_max,
                  "spec: drafts per round at most, [0, 255] (0: block size - 1; default 15), or "
                  "auto: chosen per round from the acceptance and pass costs seen so far")
      ->transform([](std::string s) {
        // kDraftAuto is -1 inside: only the word `auto` may ask for it, never a number.
        if (s == "auto") return std::to_string(decode::kDraftAuto);
        if (!s.empty() && s[0] == '-') {
          throw CLI::ValidationError("--draft-max",
                                     "draft-max must be in [0, 255] or auto (got " + s + ")");
        }
        return s;
      });
  cmd->add_option(
      "--draft-p-min", decoding.draft_p_min,
      "spec: verify only the leading drafts whose probability is >= this, [0, 1] (default 0: all)");
  cmd->add_flag("--draft-expert-budget", decoding.draft_expert_budget,
                "spec: draft rows route only among the seed's experts (fewer expert bytes per "
                "draft; output unchanged, acceptance may drop)");
  cmd->add_flag("--fuse-passes", decoding.fuse_passes,
                "diffusion/spec: each commit/verify pass also runs the next block's first "
                "denoise/draft pass, used when the next seed was guessed right (output unchanged)");
  cmd->add_option("-n,--n-predict", n_predict, "maximum tokens to generate")->capture_default_str();
  cmd->add_option("--temp,--temperature", temperature,
                  "sampling temperature (0 = greedy, the default)");
  cmd->add_option("--top-k", top_k, "top-k sampling (0 = off)");
  cmd->add_option("--top-p", top_p, "top-p sampling (1 = off)");
  cmd->add_option("--min-p", min_p, "min-p sampling (0 = off)");
  cmd->add_option("--seed", seed, "sampling seed");
  cmd->add_option("--presence-penalty", presence, "presence penalty (clover_moe default 0.9)");
  cmd->add_option("--frequency-penalty", frequency, "frequency penalty");
  cmd->add_option("--repeat-penalty", repeat, "repetition penalty (clover_moe default 1.05)");
  cmd->add_flag("--no-dllm-biases", no_dllm_biases,
                "switch off Clover's long-generation length/think-end biases");
}

decode::DecodeParams DecodeFlags::Apply(decode::DecodeParams p) const {
  p = decoding.Apply(p);
  decode::CheckDecodeRanges(p, decode::ParamNames::kFlags);
  // Bounded so that prompt + n_predict cannot overflow (-n 9223372036854775807 made n_ctx < 0).
  if (n_predict < 1 || n_predict > kMaxPredict)
    Fail("-n must be in [1, {}] (got {})", kMaxPredict, n_predict);
  p.max_tokens = n_predict;
  if (temperature) p.sampling.temperature = static_cast<float>(*temperature);
  if (top_k) p.sampling.top_k = *top_k;
  if (top_p) p.sampling.top_p = static_cast<float>(*top_p);
  if (min_p) p.sampling.min_p = static_cast<float>(*min_p);
  if (seed) p.sampling.seed = *seed;
  if (presence) p.sampling.presence_penalty = static_cast<float>(*presence);
  if (frequency) p.sampling.frequency_penalty = static_cast<float>(*frequency);
  if (repeat) p.sampling.repetition_penalty = static_cast<float>(*repeat);
  if (no_dllm_biases) p.dllm_biases = false;
  return p;
}

}  // namespace crossword::cli
