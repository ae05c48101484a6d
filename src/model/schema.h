// The tensor schema of the qwen35moe / clover_moe architecture, written once: every tensor's GGUF
// name, shape in hyperparameter terms, layer kind, presence rule and where loading puts it.
// Loading (weights.cc), `gguf synth` (tools/synth.cc) and `gguf inspect` (tools/inspect.cc) read
// this table (docs/model.md, section 2).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/hparams.h"
#include "model/weights.h"

namespace crossword::model {

/// A dimension of a tensor shape, named as in Hparams (docs/model.md, section 1).
enum class Dim : uint8_t {
  kOne,         ///< 1 (pads shapes of fewer than 3 dims)
  kEmbd,        ///< n_embd
  kVocab,       ///< n_vocab
  kHeadDim,     ///< head_dim
  kQGate,       ///< 2 x n_head x head_dim (attn_q: per head the query, then the gate)
  kQDim,        ///< n_head x head_dim
  kKvDim,       ///< n_head_kv x head_dim
  kConvDim,     ///< conv_dim = 2 x n_k_heads x d_state + d_inner
  kDInner,      ///< ssm_d_inner = n_v_heads x d_state
  kVHeads,      ///< ssm_n_v_heads
  kDState,      ///< ssm_d_state
  kConvKernel,  ///< ssm_d_conv (K)
  kExpert,      ///< n_expert
  kFfExp,       ///< n_ff_exp
  kFfShexp,     ///< n_ff_shexp
};

/// The value of `d` for `hp`, and its name ("n_embd", ...).
int64_t DimValue(Dim d, const Hparams& hp);
std::string_view DimName(Dim d);

/// Which layers hold a tensor.
enum class TensorScope : uint8_t {
  kGlobal,      ///< one tensor, no "blk.N." prefix
  kEveryLayer,  ///< every trunk layer
  kAttention,   ///< attention layers only (LayerKind::kAttention)
  kRecurrent,   ///< Gated DeltaNet layers only (LayerKind::kRecurrent)
};

/// When a tensor must be present.
enum class Presence : uint8_t {
  kRequired,
  kOptional,       ///< output.weight: absent means tied to token_embd
  kSharedExpert,   ///< required when n_expert_shared > 0
  kDiffusionOnly,  ///< in the official Clover file only, unused by the AR network; the shape is
                   ///< unpublished (the one here is synth's stand-in and is not checked)
};

/// How loading stores a tensor.
enum class Storage : uint8_t {
  kRows,     ///< token_embd: rows dequantized on use
  kMatrix,   ///< a kernels::Matrix view into the file
  kExperts,  ///< an ExpertTensor (a stack of n_expert matrices)
  kVector,   ///< an owned F32 copy
  kUnused,   ///< recognised, not loaded
};

/// One tensor of an architecture.
struct TensorSpec {
  std::string_view name;  ///< GGUF name; per-layer tensors without their "blk.N." prefix
  TensorScope scope;
  Presence presence;
  Storage storage;
  std::array<Dim, 3> ne;  ///< ggml order (ne0 contiguous); kOne pads
  /// Per-layer tensors: the LayerWeights member loading fills (the one matching `storage`).
  kernels::Matrix LayerWeights::*matrix = nullptr;
  ExpertTensor LayerWeights::*experts = nullptr;
  std::vector<float> LayerWeights::*vector = nullptr;

  /// Whether layer `kind` holds this tensor (kGlobal: false).
  bool InLayer(LayerKind kind) const;
  /// "blk.3.attn_q.weight" (layer >= 0) or the global name.
  std::string FullName(int layer) const;
  /// The shape for `hp`, trailing kOne dims dropped (at least one dim).
  std::vector<int64_t> Shape(const Hparams& hp) const;
};

/// The qwen35moe / clover_moe tensors in the order `gguf synth` writes them: token_embd; per layer
/// attn_norm, the mixer's tensors (GDN or attention), post_attention_norm, the MoE; then
/// output_norm and output.
std::span<const TensorSpec> Qwen35MoeSchema();

/// The spec of the GGUF tensor `name` ("blk.N.x" or a global name), with `*layer` set to N (-1 for
/// globals); nullptr when the schema has no such tensor.
const TensorSpec* FindTensorSpec(std::string_view name, int* layer);

}  // namespace crossword::model
