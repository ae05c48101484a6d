// Synthesize: tensor plan, per-tensor type recipe (after llama-quantize's rules), metadata,
// and streamed, multithreaded, deterministic weight generation.
#include "tools/synth.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <thread>

#include "base/error.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/schema.h"
#include "tools/chat_template.h"
#include "tools/clover_layout.h"
#include "tools/synth_vocab.h"

namespace crossword::tools {
namespace {

enum class Ftype { kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_K_M };

Ftype ParseFtype(const std::string& s) {
  if (s == "F32") return Ftype::kF32;
  if (s == "F16") return Ftype::kF16;
  if (s == "BF16") return Ftype::kBF16;
  if (s == "Q8_0") return Ftype::kQ8_0;
  if (s == "Q4_0") return Ftype::kQ4_0;
  if (s == "Q4_K_M") return Ftype::kQ4_K_M;
  Fail("--type '{}' is not supported: use F32, F16, BF16, Q8_0, Q4_0 or Q4_K_M", s);
}

// llama_ftype values written as general.file_type.
uint32_t FileTypeId(Ftype f) {
  switch (f) {
    case Ftype::kF32:
      return 0;
    case Ftype::kF16:
      return 1;
    case Ftype::kQ4_0:
      return 2;
    case Ftype::kQ8_0:
      return 7;
    case Ftype::kQ4_K_M:
      return 15;
    case Ftype::kBF16:
      return 32;
  }
  return 0;
}

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// Whether llama-quantize would quantize this tensor: 2-D+ weights, except norms, the MoE router
// and the GDN convolution.
bool Quantizable(const std::string& name, const std::vector<int64_t>& ne) {
  return ne.size() >= 2 && name.ends_with("weight") && !Contains(name, "_norm.weight") &&
         !Contains(name, "ffn_gate_inp.weight") && !Contains(name, "ssm_conv1d");
}

// llama-quantize's fallback when the row length does not fit a 256-element K-quant block.
GgmlType FitRow(GgmlType t, int64_t row) {
  if (row % GetTypeTraits(t).block_size == 0) return t;
  switch (t) {
    case GgmlType::kQ4_K:
      t = GgmlType::kQ5_0;
      break;
    case GgmlType::kQ5_K:
      t = GgmlType::kQ5_1;
      break;
    case GgmlType::kQ6_K:
      t = GgmlType::kQ8_0;
      break;
    default:
      break;
  }
  return row % GetTypeTraits(t).block_size == 0 ? t : GgmlType::kF16;
}

// The "use more bits" layer pattern of llama-quantize's Q4_K_M recipe.
bool UseMoreBits(int64_t i, int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

struct TypeContext {
  Ftype ftype;
  int64_t n_layer;
  int64_t n_attn_v;  // attention layers
};

GgmlType ChooseType(const std::string& name, const std::vector<int64_t>& ne, const TypeContext& c,
                    int64_t* attn_v_seen) {
  if (!Quantizable(name, ne)) return GgmlType::kF32;
  const int64_t row = ne[0];
  switch (c.ftype) {
    case Ftype::kF32:
      return GgmlType::kF32;
    case Ftype::kF16:
      return GgmlType::kF16;
    case Ftype::kBF16:
      return GgmlType::kBF16;
    case Ftype::kQ8_0:
      return FitRow(GgmlType::kQ8_0, row);
    case Ftype::kQ4_0:
      return FitRow(name == "output.weight" ? GgmlType::kQ6_K : GgmlType::kQ4_0, row);
    case Ftype::kQ4_K_M: {
      GgmlType t = GgmlType::kQ4_K;
      const int layer = LayerOfTensor(name);
      if (name == "output.weight") {
        t = GgmlType::kQ6_K;
      } else if (name.ends_with("attn_v.weight")) {
        if (UseMoreBits((*attn_v_seen)++, c.n_attn_v)) t = GgmlType::kQ6_K;
      } else if (Contains(name, "ffn_down") && UseMoreBits(layer, c.n_layer)) {
        t = GgmlType::kQ6_K;
      } else if (name.ends_with("attn_qkv.weight")) {
        t = GgmlType::kQ5_K;
      }
      return FitRow(t, row);
    }
  }
  return GgmlType::kF32;
}

std::string ResolvedLayout(const SynthOptions& o) {
  if (!o.layout.empty()) return o.layout;
  return o.arch == "clover_moe" ? "official" : "upstream";
}

void CheckOptions(const SynthOptions& o) {
  Check(o.arch == "clover_moe" || o.arch == "qwen35moe",
        "--arch '{}' is not supported: use clover_moe or qwen35moe", o.arch);
  const std::string layout = ResolvedLayout(o);
  Check(layout == "official" || layout == "upstream",
        "--layout '{}' is not supported: use official or upstream", layout);
  Check(o.layers >= 0 && o.layers <= 1000, "--layers {} is out of range (1..1000, 0 = preset)",
        o.layers);
  ParseFtype(o.type);
}

// ---- Weight values ----------------------------------------------------------------------------

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t HashName(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// splitmix64 stream; Normal() sums four 16-bit uniforms (Irwin-Hall, scaled to unit variance):
// cheap, deterministic, bounded at +-3.46 sigma.
struct Rng {
  uint64_t state;
  uint64_t Next() { return Mix(state += 0x9e3779b97f4a7c15ull); }
  float Normal() {
    const uint64_t r = Next();
    const uint32_t s = static_cast<uint32_t>(r & 0xffff) +
                       static_cast<uint32_t>((r >> 16) & 0xffff) +
                       static_cast<uint32_t>((r >> 32) & 0xffff) + static_cast<uint32_t>(r >> 48);
    return (static_cast<float>(s) * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
  }
  float Uniform() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }
};

// How a tensor's values are drawn.
struct Init {
  enum Kind { kNormal, kNearOne, kALog } kind = kNormal;
  float scale = 1;
  bool negate_exp = false;  // kALog: store -exp(A_log) (upstream) instead of A_log (official)
};

Init InitFor(const std::string& name, const std::vector<int64_t>& ne, const std::string& layout) {
  const float inv_sqrt_in = 1.0f / std::sqrt(static_cast<float>(ne[0]));
  if (IsSsmA(name)) return {Init::kALog, 1, layout == "upstream"};
  if (name.ends_with("norm.weight") || name.ends_with("ssm_bd_logit_scale.weight")) {
    return {Init::kNearOne, 0.05f};
  }
  if (name == "token_embd.weight") return {Init::kNormal, 1.0f};
  // Logits with a spread of about 4 nats: peaked enough for varied greedy text, not tied.
  if (name == "output.weight") return {Init::kNormal, 4.0f * inv_sqrt_in};
  if (Contains(name, "ssm_conv1d")) return {Init::kNormal, 0.5f};
  if (name.ends_with("ssm_dt.bias") || name.ends_with(".bias")) return {Init::kNormal, 0.1f};
  // Projections back into the residual stream are smaller, so 40 layers stay finite.
  if (name.ends_with("ssm_out.weight") || name.ends_with("attn_output.weight") ||
      Contains(name, "ffn_down")) {
    return {Init::kNormal, 0.5f * inv_sqrt_in};
  }
  return {Init::kNormal, inv_sqrt_in};
}

void FillValues(const Init& init, Rng* rng, float* out, int64_t n) {
  switch (init.kind) {
    case Init::kNormal:
      for (int64_t i = 0; i < n; ++i) out[i] = rng->Normal() * init.scale;
      return;
    case Init::kNearOne:
      for (int64_t i = 0; i < n; ++i) out[i] = 1.0f + rng->Normal() * init.scale;
      return;
    case Init::kALog:
      // A_log ~ U(log 1, log 16): decay rates A = exp(A_log) in [1, 16).
      for (int64_t i = 0; i < n; ++i) {
        const float a_log = rng->Uniform() * std::log(16.0f);
        out[i] = init.negate_exp ? -std::exp(a_log) : a_log;
      }
      return;
  }
}

// ---- Metadata -----------------------------------------------------------------------------------

std::vector<std::pair<std::string, gguf::Value>> Metadata(const SynthDims& d, const SynthOptions& o,
                                                          const SynthVocab& v) {
  using gguf::Value;
  const std::string& a = o.arch;
  const std::string layout = ResolvedLayout(o);
  const Ftype ftype = ParseFtype(o.type);
  std::vector<std::pair<std::string, Value>> kv;
  auto add = [&](std::string key, Value value) {
    kv.emplace_back(std::move(key), std::move(value));
  };
  auto u32 = [](int64_t x) { return Value::Uint32(static_cast<uint32_t>(x)); };
  add("general.architecture", Value::String(a));
  // Nothing here depends on the layout, so that patch(official) is byte-identical to upstream.
  add("general.name", Value::String(fmt::format("crossword synth {}", o.preset)));
  add("general.description",
      Value::String(fmt::format("Random weights with the structure of Clover-35B-A3B; written by "
                                "crossword gguf synth, seed {}. Not a trained model.",
                                o.seed)));
  add("general.file_type", u32(FileTypeId(ftype)));
  if (ftype != Ftype::kF32 && ftype != Ftype::kF16 && ftype != Ftype::kBF16) {
    add("general.quantization_version", u32(2));
  }
  add(a + ".context_length", u32(d.context_length));
  add(a + ".embedding_length", u32(d.n_embd));
  add(a + ".block_count", u32(d.n_layer));
  add(a + ".attention.head_count", u32(d.n_head));
  add(a + ".attention.head_count_kv", u32(d.n_head_kv));
  add(a + ".attention.key_length", u32(d.head_dim));
  add(a + ".attention.value_length", u32(d.head_dim));
  add(a + ".attention.layer_norm_rms_epsilon", Value::Float32(d.rms_eps));
  add(a + ".rope.dimension_count", u32(d.n_rot));
  add(a + ".rope.dimension_sections", Value::Int32s(d.rope_sections));
  add(a + ".rope.freq_base", Value::Float32(d.rope_freq_base));
  add(a + ".ssm.conv_kernel", u32(d.ssm_conv_kernel));
  add(a + ".ssm.state_size", u32(d.ssm_state));
  add(a + ".ssm.group_count", u32(d.ssm_groups));
  add(a + ".ssm.time_step_rank", u32(d.ssm_dt_rank));
  add(a + ".ssm.inner_size", u32(d.ssm_inner()));
  add(a + ".full_attention_interval", u32(d.full_attention_interval));
  add(a + ".expert_count", u32(d.n_expert));
  add(a + ".expert_used_count", u32(d.n_expert_used));
  add(a + ".expert_feed_forward_length", u32(d.n_ff_exp));
  add(a + ".expert_shared_feed_forward_length", u32(d.n_ff_shexp));
  // `gguf patch` inserts the key at this same place, so patch(official) == upstream.
  if (layout == "upstream") add(SharedExpertCountKey(a), u32(1));
  if (a == "clover_moe") {
    add(a + ".diffusion.block_size", u32(d.diffusion_block_size));
    add(a + ".diffusion.threshold", Value::Float32(d.diffusion_threshold));
    add(a + ".diffusion.shift_logits", Value::Bool(true));
  }
  add("tokenizer.ggml.model", Value::String("gpt2"));
  add("tokenizer.ggml.pre", Value::String("qwen35"));
  add("tokenizer.ggml.tokens", Value::Strings(v.tokens));
  add("tokenizer.ggml.token_type", Value::Int32s(v.types));
  add("tokenizer.ggml.merges", Value::Strings(v.merges));
  add("tokenizer.ggml.eos_token_id", u32(v.im_end_id));
  add("tokenizer.ggml.padding_token_id", u32(v.endoftext_id));
  add("tokenizer.ggml.bos_token_id", u32(v.endoftext_id));
  add("tokenizer.ggml.mask_token_id", u32(v.mask_id));
  add("tokenizer.ggml.add_bos_token", Value::Bool(false));
  add("tokenizer.chat_template", Value::String(std::string(ChatTemplateSource())));
  return kv;
}

SynthDims EffectiveDims(const SynthOptions& o) {
  CheckOptions(o);
  SynthDims d = PresetDims(o.preset);
  if (o.layers > 0) d.n_layer = o.layers;
  return d;
}

}  // namespace

SynthDims PresetDims(const std::string& preset) {
  SynthDims d;
  if (preset == "clover-35b-a3b") {
    d.n_embd = 2048, d.n_layer = 40, d.n_head = 16, d.n_head_kv = 2, d.head_dim = 256;
    d.n_rot = 64, d.rope_sections = {11, 11, 10, 0}, d.rope_freq_base = 1e7f;
    d.context_length = 131072;
    d.ssm_conv_kernel = 4, d.ssm_state = 128, d.ssm_groups = 16, d.ssm_dt_rank = 32;
    d.n_expert = 256, d.n_expert_used = 8, d.n_ff_exp = 512, d.n_ff_shexp = 512;
    d.n_bpe = 248044, d.n_vocab = 248320;
    return d;
  }
  if (preset == "tiny") {
    // Same structure; every matrix row is a multiple of 256 so K-quants apply without fallback,
    // and value heads = 2 x key heads so the tiled head order matters.
    d.n_embd = 256, d.n_layer = 4, d.n_head = 4, d.n_head_kv = 2, d.head_dim = 64;
    d.n_rot = 16, d.rope_sections = {3, 3, 2, 0}, d.rope_freq_base = 1e7f;
    d.context_length = 4096;
    d.ssm_conv_kernel = 4, d.ssm_state = 64, d.ssm_groups = 2, d.ssm_dt_rank = 4;
    d.n_expert = 8, d.n_expert_used = 2, d.n_ff_exp = 256, d.n_ff_shexp = 256;
    d.n_bpe = 1600, d.n_vocab = 1600 + 27;
    return d;
  }
  Fail("--preset '{}' is not known: use clover-35b-a3b or tiny", preset);
}

model::Hparams SynthHparams(const SynthDims& d) {
  model::Hparams hp;
  hp.n_embd = d.n_embd;
  hp.n_vocab = d.n_vocab;
  hp.n_layer = static_cast<int>(d.n_layer);
  hp.n_head = static_cast<int>(d.n_head);
  hp.n_head_kv = static_cast<int>(d.n_head_kv);
  hp.head_dim = d.head_dim;
  hp.ssm_d_conv = static_cast<int>(d.ssm_conv_kernel);
  hp.ssm_d_state = d.ssm_state;
  hp.ssm_n_k_heads = static_cast<int>(d.ssm_groups);
  hp.ssm_n_v_heads = static_cast<int>(d.ssm_dt_rank);
  hp.ssm_d_inner = d.ssm_inner();
  hp.n_expert = static_cast<int>(d.n_expert);
  hp.n_expert_used = static_cast<int>(d.n_expert_used);
  hp.n_ff_exp = d.n_ff_exp;
  hp.n_ff_shexp = d.n_ff_shexp;
  hp.n_expert_shared = 1;
  for (int64_t il = 0; il < d.n_layer; ++il) {
    hp.layer_kinds.push_back(d.is_recurrent(il) ? model::LayerKind::kRecurrent
                                                : model::LayerKind::kAttention);
  }
  return hp;
}

std::vector<SynthTensor> PlanSynthTensors(const SynthDims& d, const SynthOptions& o) {
  CheckOptions(o);
  const std::string layout = ResolvedLayout(o);
  const model::Hparams hp = SynthHparams(d);
  const TypeContext ctx{ParseFtype(o.type), d.n_layer, hp.n_attention()};
  int64_t attn_v_seen = 0;
  std::vector<SynthTensor> out;
  auto add = [&](std::string name, std::vector<int64_t> ne) {
    const GgmlType t = ChooseType(name, ne, ctx, &attn_v_seen);
    out.push_back({std::move(name), std::move(ne), t});
  };
  // The schema's order: the globals before the first per-layer tensor, every layer, the rest.
  const std::span<const model::TensorSpec> schema = model::Qwen35MoeSchema();
  bool layers_done = false;
  for (const model::TensorSpec& spec : schema) {
    if (spec.scope == model::TensorScope::kGlobal) {
      add(spec.FullName(-1), spec.Shape(hp));
      continue;
    }
    if (layers_done) continue;
    layers_done = true;
    for (int il = 0; il < hp.n_layer; ++il) {
      for (const model::TensorSpec& t : schema) {
        if (!t.InLayer(hp.layer_kinds[il])) continue;
        // The fork's diffusion-only tensors: their shapes are unpublished; the schema's are
        // small stand-ins (docs/gguf.md).
        if (t.presence == model::Presence::kDiffusionOnly && layout != "official") continue;
        add(t.FullName(il), t.Shape(hp));
      }
    }
  }
  return out;
}

SynthSummary Synthesize(const SynthOptions& o, const Logger& log) {
  const auto start = std::chrono::steady_clock::now();
  Check(o.dry_run || !o.output.empty(), "gguf synth: no output file given (-o OUT)");
  const SynthDims d = EffectiveDims(o);
  const std::string layout = ResolvedLayout(o);
  const std::vector<SynthTensor> plan = PlanSynthTensors(d, o);
  const SynthVocab vocab = BuildSynthVocab({d.n_bpe, d.n_vocab}, o.seed);

  const std::string tmp =
      o.dry_run ? std::string("/dev/null") : fmt::format("{}.tmp-{}", o.output, ::getpid());
  SynthSummary summary;
  try {
    gguf::Writer w(tmp);
    for (auto& [key, value] : Metadata(d, o, vocab))
      w.AddKeyValue(std::move(key), std::move(value));
    for (const SynthTensor& t : plan) {
      w.AddTensor(t.name, t.type, t.ne);
      int64_t n = 1;
      for (int64_t x : t.ne) n *= x;
      summary.n_params += n;
    }
    summary.file_size = w.PlannedFileSize();
    summary.n_tensors = plan.size();
    log.Info("synth: {} {} {} layout, {} layers, {} tensors, {:.3f} B parameters, {} bytes -> {}",
             o.arch, o.type, layout, d.n_layer, plan.size(), summary.n_params * 1e-9,
             summary.file_size, o.dry_run ? "(dry run)" : o.output);
    if (o.dry_run) return summary;

    ThreadPool pool(o.threads > 0
                        ? o.threads
                        : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    std::vector<std::vector<float>> scratch(static_cast<size_t>(pool.size()));
    std::vector<std::byte> batch;
    constexpr int64_t kElemsPerTask = 1 << 18;
    constexpr uint64_t kBatchBytes = 32ull << 20;
    const uint64_t seed = Mix(o.seed);
    // A sparse file has no data to write: its tensors are one hole (FinishSparse).
    for (const SynthTensor& t : std::span(plan).first(o.sparse ? 0 : plan.size())) {
      const int64_t row = t.ne[0];
      int64_t rows = 1;
      for (size_t i = 1; i < t.ne.size(); ++i) rows *= t.ne[i];
      const uint64_t row_bytes = *RowBytes(t.type, row);
      const Init init = InitFor(t.name, t.ne, layout);
      const uint64_t tensor_seed = Mix(seed ^ HashName(t.name));
      const int64_t rows_per_task = std::max<int64_t>(1, kElemsPerTask / std::max<int64_t>(row, 1));
      const int64_t tasks_per_batch =
          std::max<int64_t>(1, static_cast<int64_t>(kBatchBytes / (row_bytes * rows_per_task + 1)));
      const int64_t n_tasks = (rows + rows_per_task - 1) / rows_per_task;
      for (int64_t first = 0; first < n_tasks; first += tasks_per_batch) {
        const int64_t count = std::min(tasks_per_batch, n_tasks - first);
        const int64_t row_begin = first * rows_per_task;
        const int64_t row_end = std::min(rows, (first + count) * rows_per_task);
        batch.resize(static_cast<size_t>((row_end - row_begin) * row_bytes));
        pool.ParallelFor(count, [&](int64_t k, int thread) {
          const int64_t task = first + k;
          const int64_t r0 = task * rows_per_task, r1 = std::min(rows, r0 + rows_per_task);
          std::vector<float>& buf = scratch[static_cast<size_t>(thread)];
          buf.resize(static_cast<size_t>((r1 - r0) * row));
          // One stream per (tensor, task): the values do not depend on the thread count.
          Rng rng{tensor_seed + Mix(static_cast<uint64_t>(task) + 1)};
          FillValues(init, &rng, buf.data(), (r1 - r0) * row);
          std::byte* dst = batch.data() + (r0 - row_begin) * row_bytes;
          for (int64_t r = r0; r < r1; ++r) {
            QuantizeRow(t.type, buf.data() + (r - r0) * row, dst + (r - r0) * row_bytes, row);
          }
        });
        w.WriteTensorData(batch);
        if (o.progress) {
          std::fprintf(stderr, "\rsynth: %5.1f%%  %-40s",
                       100.0 * static_cast<double>(w.bytes_written()) /
                           static_cast<double>(summary.file_size),
                       t.name.c_str());
        }
      }
    }
    if (o.sparse) {
      w.FinishSparse();
    } else {
      w.Finish();
    }
    if (o.progress) std::fprintf(stderr, "\n");
  } catch (...) {
    if (!o.dry_run) ::unlink(tmp.c_str());  // never the /dev/null of a dry run
    throw;
  }
  if (std::rename(tmp.c_str(), o.output.c_str()) != 0) {
    ::unlink(tmp.c_str());
    Fail("cannot rename '{}' to '{}': {}", tmp, o.output, std::strerror(errno));
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

std::string SynthesizeOnce(const SynthOptions& options) {
  if (!std::filesystem::exists(options.output)) Synthesize(options, Logger::Silent());
  return options.output;
}

}  // namespace crossword::tools
