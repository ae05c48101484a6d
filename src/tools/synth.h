// `crossword gguf synth`: GGUF test models with the exact structure of Clover-35B-A3B (GDN layers
// with full attention every 4th, 256 routed experts top-8 + a shared expert, Qwen3.5 tokenizer
// and chat template), random weights, either layout, any depth, several tensor types.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/log.h"
#include "core/types.h"
#include "model/hparams.h"

namespace crossword::tools {

/// Hyperparameters of a synthesized model (SynthHparams gives them in model::Hparams terms).
struct SynthDims {
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  ///< attention key/value length
  int64_t n_rot = 0;     ///< rope.dimension_count
  std::array<int32_t, 4> rope_sections = {0, 0, 0, 0};
  float rope_freq_base = 0;
  float rms_eps = 1e-6f;
  int64_t context_length = 0;
  int64_t ssm_conv_kernel = 0;
  int64_t ssm_state = 0;    ///< GDN head dim (k = v)
  int64_t ssm_groups = 0;   ///< GDN key heads
  int64_t ssm_dt_rank = 0;  ///< GDN value heads
  int64_t full_attention_interval = 4;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;
  int64_t n_bpe = 0;    ///< BPE tokens before the special tokens
  int64_t n_vocab = 0;  ///< embedding rows
  int64_t diffusion_block_size = 32;
  float diffusion_threshold = 0.95f;

  int64_t ssm_inner() const { return ssm_dt_rank * ssm_state; }
  int64_t conv_dim() const { return 2 * ssm_groups * ssm_state + ssm_inner(); }
  /// GDN unless (il + 1) is a multiple of full_attention_interval.
  bool is_recurrent(int64_t il) const { return (il + 1) % full_attention_interval != 0; }
};

/// "clover-35b-a3b" (the real widths) or "tiny" (same structure, 256 wide, 4 layers, ~1.6k vocab).
/// Throws crossword::Error for another name.
SynthDims PresetDims(const std::string& preset);

/// Everything `gguf synth` takes.
struct SynthOptions {
  std::string preset = "tiny";
  int64_t layers = 0;        ///< 0: the preset's depth
  std::string type = "F32";  ///< F32 | F16 | BF16 | Q8_0 | Q4_0 | Q4_K_M
  std::string layout;        ///< official | upstream ("" = official for clover_moe, else upstream)
  std::string arch = "clover_moe";  ///< clover_moe | qwen35moe
  uint64_t seed = 1;
  std::string output;
  int threads = 0;        ///< 0: all hardware threads
  bool progress = false;  ///< redraw a progress line on stderr
  bool dry_run = false;   ///< plan everything and report the size, write nothing
  /// Write the header only: every tensor is a hole of zeros (no disk space, no time), for speed
  /// tests whose weights are generated on the device (bench/gpu_check.sh).
  bool sparse = false;
};

/// One tensor of the plan: name, ggml shape, storage type.
struct SynthTensor {
  std::string name;
  std::vector<int64_t> ne;
  GgmlType type;
};

/// `dims` as the loader's hyperparameters (one shared expert), for the tensor schema.
model::Hparams SynthHparams(const SynthDims& dims);

/// The tensors a synth run writes, in file order (model/schema.h's table order) (exposed for tests
/// and size estimates). Throws crossword::Error on bad options.
std::vector<SynthTensor> PlanSynthTensors(const SynthDims& dims, const SynthOptions& options);

/// What a run produced.
struct SynthSummary {
  uint64_t file_size = 0;
  int64_t n_params = 0;
  size_t n_tensors = 0;
  double seconds = 0;
};

/// Writes the model to options.output (through a temporary name, renamed at the end; an
/// interrupted run leaves no file under that name); with dry_run only plans it. Deterministic for a
/// given seed and options, independent of the thread count. Throws crossword::Error on bad options
/// or I/O failure.
SynthSummary Synthesize(const SynthOptions& options, const Logger& log);

/// Tests' model files: Synthesize(options) without a log unless options.output exists already
/// (one file per name serves every test of a run; a file is only ever there whole, see above).
/// Returns options.output. Throws as Synthesize.
std::string SynthesizeOnce(const SynthOptions& options);

}  // namespace crossword::tools
