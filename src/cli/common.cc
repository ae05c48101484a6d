// The flag registry of the model-running subcommands (cli/common.h).
#include "cli/common.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

#include "backends/registry.h"
#include "base/error.h"

namespace crossword::cli {
namespace {

// llama.cpp's KV cache types (common/arg.cpp's kv_cache_types); crossword stores f16 or f32.
bool IsLlamaCacheType(const std::string& t) {
  for (const char* k : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"}) {
    if (t == k) return true;
  }
  return false;
}

// A CLI11 transform for a count flag that also takes the word `auto`: `auto` becomes
// `auto_value` (negative inside, so that only the word may ask for it); anything but the word or
// decimal digits (spaces, signs, an empty value, a fraction) is refused naming the range
// [0, max], which is checked later (decode::CheckDecodeRanges).
std::function<std::string(std::string)> CountOrAuto(std::string name, int max, int auto_value) {
  return [name = std::move(name), max, auto_value](std::string s) {
    std::string lower = s;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (lower == "auto") return std::to_string(auto_value);
    const bool digits = !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (!digits) {
      throw CLI::ValidationError(
          fmt::format("{} must be in [0, {}] or auto (got '{}')", name, max, s));
    }
    return std::to_string(std::stoi(s));  // decimal: no octal reading of a leading zero
  };
}

// --draft-skip-ffn: "none" or layer numbers separated by commas ("2,3,4"), each in [0, 63], as
// a mask (bit l: layer l); the model's range is checked when a generation starts.
uint64_t ParseLayerList(const std::string& s) {
  if (s == "none") return 0;
  uint64_t mask = 0;
  size_t at = 0;
  while (true) {
    const size_t end = std::min(s.find(',', at), s.size());
    const std::string item = s.substr(at, end - at);
    const bool digits =
        !item.empty() && item.size() <= 2 &&
        std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || std::stoi(item) > 63) {
      throw CLI::ValidationError(fmt::format(
          "--draft-skip-ffn must be none or layer numbers in [0, 63] separated by commas, such as "
          "2,3,4 (got '{}')",
          s));
    }
    mask |= uint64_t{1} << std::stoi(item);
    if (end == s.size()) return mask;
    at = end + 1;
  }
}

}  // namespace

void FlagNotes::Print(const Logger& log) const {
  for (const std::string& line : lines_) log.Warn("{}", line);
}

void ModelFlags::Add(CLI::App* cmd, Command command, bool model_required) {
  auto* m =
      cmd->add_option("-m,--model", model, "GGUF model file (default: the embedded tiny model)")
          ->envname("LLAMA_ARG_MODEL");
  if (model_required) m->required();
  cmd->add_option("-t,--threads", threads,
                  "threads (default: all cores; more than 4 per hardware thread is refused)")
      ->check(CLI::NonNegativeNumber)
      ->envname("LLAMA_ARG_THREADS");
  if (command & (kRun | kServe | kBench)) {
    cmd->add_option("--threads-batch", threads_batch,
                    "llama.cpp's prompt-processing threads; one pool here, as -t (also -tb)")
        ->check(CLI::NonNegativeNumber)
        ->envname("LLAMA_ARG_THREADS_BATCH");
  }
  {
    cmd->add_option(
           "-c,--ctx-size", n_ctx,
           command == kServe ? "total context over all slots, split evenly (0: 4096 per slot)"
           : command == kRun ? "context size in tokens, prompt + answer (0: the model's training "
                               "context, at most 4096)"
                             : "context size in tokens (prompt + answer)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{command & (kServe | kRun) ? 0 : 1}, kMaxCtx))
        ->envname("LLAMA_ARG_CTX_SIZE");
  }
  if (command & (kRun | kServe)) {
    cmd->add_option("-b,--batch-size", batch,
                    command == kServe ? "tokens per forward pass over all slots (default 512)"
                                      : "prompt tokens per forward pass (default 512)")
        ->envname("LLAMA_ARG_BATCH");
    cmd->add_option("--ubatch-size", ubatch,
                    "llama.cpp's physical batch; one batch size here, -b (also -ub)")
        ->envname("LLAMA_ARG_UBATCH");
  }
  cmd->add_flag("--no-mmap", no_mmap, "read the model into RAM instead of mapping it")
      ->envname("LLAMA_ARG_NO_MMAP");
  cmd->add_flag("--mlock", mlock, "pin the model in RAM")->envname("LLAMA_ARG_MLOCK");
  cmd->add_flag(
      "--no-repack", no_repack,
      "keep no tile-layout copy of quantized weights (multi-row passes repack on the fly)");
  cmd->add_option("--kv-type", kv_type, "KV cache type: f16 (default) or f32");
  cmd->add_option("--cache-type-k", cache_type_k,
                  "KV cache type of K (also -ctk): f16 or f32; llama.cpp's others run as f16")
      ->envname("LLAMA_ARG_CACHE_TYPE_K");
  cmd->add_option("--cache-type-v", cache_type_v,
                  "KV cache type of V (also -ctv): f16 or f32; llama.cpp's others run as f16")
      ->envname("LLAMA_ARG_CACHE_TYPE_V");
  cmd->add_option("--log-level", log_level, "debug, info, warn, error or silent")
      ->capture_default_str();
  cmd->add_option("--device", device, backends::kDeviceFlagHelp)->capture_default_str();
  cmd->add_option("--n-gpu-layers,--gpu-layers", n_gpu_layers, backends::kGpuLayersFlagHelp)
      ->capture_default_str()
      ->envname("LLAMA_ARG_N_GPU_LAYERS");
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

GgmlType ModelFlags::KvType(FlagNotes* notes) const {
  auto parse = [](const std::string& t, const char* flag) {
    if (t == "f16" || t == "F16") return GgmlType::kF16;
    if (t == "f32" || t == "F32") return GgmlType::kF32;
    if (!IsLlamaCacheType(t)) {
      Fail("{} must be f16 or f32 (llama.cpp's bf16, q8_0, q4_0, ... run as f16; got '{}')", flag,
           t);
    }
    return GgmlType::kBF16;  // a llama.cpp type crossword stores as f16 (noted below)
  };
  GgmlType type = GgmlType::kF16;
  std::string others;
  for (const auto& [t, flag] :
       {std::pair{kv_type, "--kv-type"}, {cache_type_k, "-ctk"}, {cache_type_v, "-ctv"}}) {
    if (t.empty()) continue;
    const GgmlType g = parse(t, flag);
    if (g == GgmlType::kF32) type = GgmlType::kF32;
    if (g == GgmlType::kBF16) others += fmt::format("{}{} {}", others.empty() ? "" : ", ", flag, t);
  }
  if (notes && !others.empty()) {
    notes->Add(fmt::format("{}: the KV cache is stored as {} (crossword stores K/V as f16 or f32)",
                           others, type == GgmlType::kF32 ? "f32" : "f16"));
  }
  if (notes && type == GgmlType::kF32 && !cache_type_k.empty() && !cache_type_v.empty() &&
      cache_type_k != cache_type_v) {
    notes->Add(fmt::format("-ctk {} -ctv {}: K and V share one type here: both f32", cache_type_k,
                           cache_type_v));
  }
  return type;
}

void ModelFlags::AddNotes(FlagNotes& notes) const {
  if (threads_batch > 0 && threads_batch != threads) {
    notes.Add(fmt::format(
        "-tb {}: no effect: prompt and generation share one pool of -t threads ({})", threads_batch,
        threads > 0 ? std::to_string(threads) : std::string("all cores")));
  }
  if (ubatch && (!batch || *ubatch != *batch)) {
    notes.Add(fmt::format("-ub {}: no effect: crossword has one batch size, -b ({})", *ubatch,
                          batch ? std::to_string(*batch) : std::string("512")));
  }
}

void DecodeFlags::Add(CLI::App* cmd, Command command) {
  const bool serve = command == kServe;
  cmd->add_option("--mode", decoding.mode,
                  serve ? "default decoding mode: ar, diffusion or spec"
                        : "decoding mode: ar, diffusion or spec")
      ->capture_default_str();
  cmd->add_option("--block-size", decoding.block_size,
                  "diffusion block / spec draft length (default: from the model, 32)");
  cmd->add_option("--threshold", decoding.threshold,
                  "diffusion commit threshold (default: from the model, 0.95)");
  cmd->add_option("--draft-max", decoding.draft_max,
                  fmt::format("spec: drafts per round at most, [0, 255] (0: block size - 1), or "
                              "auto: chosen per round from the acceptance and pass costs seen so "
                              "far (default {})",
                              serve ? "auto" : "15"))
      ->transform(CountOrAuto("draft-max", 255, decode::kDraftAuto))
      ->type_name("INT|auto");
  cmd->add_option(
      "--draft-p-min", decoding.draft_p_min,
      "spec: verify only the leading drafts whose probability is >= this, [0, 1] (default 0: all)");
  cmd->add_option("--verify-chunk", decoding.verify_chunk,
                  "spec: logit rows of a verify pass's first chunk, [0, 256] or auto; the other "
                  "rows are computed only when every draft in it was accepted (auto: chosen per "
                  "round from the acceptance so far, the default; 0: all rows in the pass; "
                  "output unchanged)")
      ->transform(CountOrAuto("verify-chunk", 256, decode::kVerifyChunkAuto))
      ->type_name("INT|auto");
  cmd->add_flag("--draft-expert-budget", decoding.draft_expert_budget,
                "spec: draft rows route only among the seed's experts (fewer expert bytes per "
                "draft; output unchanged, acceptance may drop)");
  cmd->add_option_function<std::string>(
         "--draft-skip-ffn",
         [this](const std::string& v) { decoding.draft_skip_ffn = ParseLayerList(v); },
         "spec: draft passes skip the FFN blocks of these layers, e.g. 2,3,4 (cheaper, rougher "
         "drafts; output unchanged; default none, the embedded model's 2,3,4; docs/decoding.md)")
      ->type_name("LAYERS|none");
  // Not on serve: the scheduler's contexts hold one block per slot (docs/decoding.md).
  if (!serve) {
    cmd->add_flag(
        "--fuse-passes", decoding.fuse_passes,
        "diffusion/spec: each commit/verify pass also runs the next block's first "
        "denoise/draft pass, used when the next seed was guessed right (output unchanged)");
  }
  if (serve) n_predict = -1;
  cmd->add_option("-n,--n-predict,--max-tokens", n_predict,
                  serve ? "default max_tokens of a request (-1: the rest of the slot's context)"
                        : "maximum tokens to generate")
      ->capture_default_str()
      ->envname("LLAMA_ARG_N_PREDICT");
  const char* d = serve ? "default " : "";
  cmd->add_option("--temp,--temperature", decoding.temperature,
                  fmt::format("{}sampling temperature (0 = greedy, the model's default)", d));
  cmd->add_option("--top-k", decoding.top_k, fmt::format("{}top-k sampling (0 = off)", d));
  cmd->add_option("--top-p", decoding.top_p, fmt::format("{}top-p sampling (1 = off)", d));
  cmd->add_option("--min-p", decoding.min_p, fmt::format("{}min-p sampling (0 = off)", d));
  cmd->add_option_function<int64_t>(
      "-s,--seed",
      [this](int64_t v) {
        if (v < -1) Fail("--seed must be >= 0, or -1 for a random seed (got {})", v);
        decoding.seed = v == -1 ? std::random_device{}() : static_cast<uint64_t>(v);
        decoding.random_seed = v == -1;
      },
      fmt::format("{}sampling seed (-1: a random one; serve: one per request)", d));
  cmd->add_option("--presence-penalty", decoding.presence,
                  fmt::format("{}presence penalty (clover_moe default 0.9)", d));
  cmd->add_option("--frequency-penalty", decoding.frequency, fmt::format("{}frequency penalty", d));
  cmd->add_option("--repeat-penalty", decoding.repeat,
                  fmt::format("{}repetition penalty (clover_moe default 1.05)", d));
  cmd->add_flag("--no-dllm-biases", no_dllm_biases,
                "switch off Clover's long-generation length/think-end biases");
}

void DecodeFlags::CheckSampling() const {
  const decode::DecodeOverrides& o = decoding;
  auto in = [](const std::optional<double>& v, double lo, double hi) {
    return !v || (std::isfinite(*v) && *v >= lo && *v <= hi);
  };
  Check(in(o.temperature, 0, 100), "--temp must be in [0, 100] (got {})",
        o.temperature.value_or(0));
  Check(!o.top_k || *o.top_k >= -1, "--top-k must be >= 0, or -1 (off) (got {})",
        o.top_k.value_or(0));
  Check(in(o.top_p, 1e-9, 1), "--top-p must be in (0, 1] (got {})", o.top_p.value_or(0));
  Check(in(o.min_p, 0, 1), "--min-p must be in [0, 1] (got {})", o.min_p.value_or(0));
  Check(in(o.presence, -2, 2), "--presence-penalty must be in [-2, 2] (got {})",
        o.presence.value_or(0));
  Check(in(o.frequency, -2, 2), "--frequency-penalty must be in [-2, 2] (got {})",
        o.frequency.value_or(0));
  Check(in(o.repeat, 1e-9, 10), "--repeat-penalty must be in (0, 10] (got {})",
        o.repeat.value_or(0));
}

decode::DecodeParams DecodeFlags::Apply(decode::DecodeParams p) const {
  CheckSampling();
  p = decoding.Apply(p);
  if (p.sampling.top_k < 0) p.sampling.top_k = 0;  // llama.cpp: <= 0 is off
  decode::CheckDecodeRanges(p, decode::ParamNames::kFlags);
  // Bounded so that prompt + n_predict cannot overflow (-n 9223372036854775807 made n_ctx < 0).
  // -1 (llama.cpp's "no limit") runs until the context (-c) is full.
  if ((n_predict < 1 && n_predict != -1) || n_predict > kMaxPredict)
    Fail("-n must be in [1, {}], or -1 (until the context is full) (got {})", kMaxPredict,
         n_predict);
  p.max_tokens = n_predict == -1 ? kMaxPredict : n_predict;
  if (no_dllm_biases) p.dllm_biases = false;
  return p;
}

}  // namespace crossword::cli
