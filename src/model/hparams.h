// Hyperparameters of a clover_moe / qwen35moe network, read and checked from GGUF metadata.
// Key names follow llama.cpp's qwen35moe loader (docs/model.md, section 1).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/log.h"
#include "gguf/gguf.h"

namespace crossword::model {

/// What the token mixer of a trunk layer is (docs/model.md, section 3).
enum class LayerKind : uint8_t {
  kAttention,  ///< gated full attention (KV cache)
  kRecurrent,  ///< Gated DeltaNet (conv + SSM state)
};

/// Everything the forward pass needs to know about the network's shape.
struct Hparams {
  std::string arch;  ///< "clover_moe" or "qwen35moe" (the metadata key prefix)
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;  ///< context_length (tokens)
  int64_t n_embd = 0;
  int n_layer = 0;        ///< trunk layers = block_count - nextn_predict_layers
  int n_layer_nextn = 0;  ///< optional multi-token-prediction blocks after the trunk (ignored)
  std::vector<LayerKind> layer_kinds;  ///< per trunk layer
  bool is_recurrent(int il) const { return layer_kinds[il] == LayerKind::kRecurrent; }

  // Gated attention layers.
  int n_head = 0;
  int n_head_kv = 0;
  int64_t head_dim = 0;  ///< attention.key_length (= value_length)
  int n_rot = 0;         ///< rope.dimension_count (NeoX pairs on the first n_rot dims)
  std::array<int32_t, 4> rope_sections = {0, 0, 0, 0};
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-6f;

  // Gated DeltaNet layers.
  int ssm_d_conv = 0;       ///< conv kernel K
  int64_t ssm_d_state = 0;  ///< head dim of keys/values (dk = dv)
  int ssm_n_k_heads = 0;    ///< ssm.group_count
  int ssm_n_v_heads = 0;    ///< ssm.time_step_rank
  int64_t ssm_d_inner = 0;  ///< n_v_heads * d_state
  int64_t conv_dim() const { return 2 * ssm_n_k_heads * ssm_d_state + ssm_d_inner; }
  int64_t ssm_key_dim() const { return ssm_n_k_heads * ssm_d_state; }

  // Mixture of experts.
  int n_expert = 0;
  int n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;
  int n_expert_shared = 0;
  bool expert_shared_count_present = false;

  // Diffusion settings (clover_moe.diffusion.*; defaults from Clover's config.json).
  int diffusion_block_size = 32;
  float diffusion_threshold = 0.95f;
  bool diffusion_shift_logits = true;

  int n_recurrent() const;
  int n_attention() const;
};

/// Reads the hyperparameters of `file` (general.architecture must be clover_moe or qwen35moe).
/// Applies the documented defaults: expert_shared_count = 1 when absent (Clover's official file
/// lacks it; logged), full_attention_interval = 4. Throws crossword::Error naming the key, the
/// expected and actual value, and what to do when a key is missing, zero or inconsistent
/// (e.g. ssm.inner_size != time_step_rank * state_size, head_count not a multiple of
/// head_count_kv, odd n_rot, more used experts than experts).
Hparams ReadHparams(const gguf::File& file, const Logger& logger);

}  // namespace crossword::model
