// Weight tensors of a clover_moe / qwen35moe network: located, shape/type-checked against the
// hyperparameters, and the official file's quirks resolved once, at load.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "base/log.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/hparams.h"

namespace crossword::model {

/// Which of the three known differences between DiffuSpace's official Clover GGUF ("fork layout")
/// and the layout upstream llama.cpp expects are present (docs/model.md, "Official Clover file
/// quirks").
struct LayoutReport {
  bool shared_count_missing = false;  ///< 1: `<arch>.expert_shared_count` absent
  int n_diffusion_tensors =
      0;  ///< 2: ssm_bd_history.{weight,bias}, ssm_bd_logit_scale, ssm_conv1d.weight_right
  bool ssm_a_raw = false;  ///< 3: blk.N.ssm_a holds raw A_log (converted at load)
  bool official() const { return shared_count_missing || n_diffusion_tensors > 0 || ssm_a_raw; }
  /// One line: "official (fork) layout: ..." or "upstream layout".
  std::string Describe() const;
};

/// The routed experts' stacked 3-D tensor {n_in, n_out, n_expert}: expert e is a Matrix.
struct ExpertTensor {
  kernels::Matrix first;     ///< expert 0
  size_t expert_stride = 0;  ///< bytes between experts
  size_t packed_stride = 0;  ///< bytes between experts' repacked copies (when first.packed is set)
  int n_expert = 0;
  kernels::Matrix Expert(int e) const {
    kernels::Matrix m = first;
    m.data = static_cast<const std::byte*>(first.data) + static_cast<size_t>(e) * expert_stride;
    if (first.packed)
      m.packed =
          static_cast<const std::byte*>(first.packed) + static_cast<size_t>(e) * packed_stride;
    return m;
  }
};

/// One trunk layer. Small vectors are owned F32 copies; matrices point into the GGUF mapping.
/// Names, shapes and which kind holds what: model/schema.h (the one table).
struct LayerWeights {
  LayerKind kind = LayerKind::kAttention;
  bool is_recurrent() const { return kind == LayerKind::kRecurrent; }
  std::vector<float> attn_norm;            ///< {n_embd}, holds (1 + w) already
  std::vector<float> post_attention_norm;  ///< {n_embd}

  // Gated attention (kind kAttention).
  kernels::Matrix attn_q;          ///< {n_embd, n_head * head_dim * 2}: per head [q | gate]
  kernels::Matrix attn_k;          ///< {n_embd, n_head_kv * head_dim}
  kernels::Matrix attn_v;          ///< {n_embd, n_head_kv * head_dim}
  kernels::Matrix attn_output;     ///< {n_head * head_dim, n_embd}
  std::vector<float> attn_q_norm;  ///< {head_dim}
  std::vector<float> attn_k_norm;  ///< {head_dim}

  // Gated DeltaNet (kind kRecurrent).
  kernels::Matrix
      attn_qkv;  ///< {n_embd, conv_dim}: [q (k-heads) | k (k-heads) | v (v-heads, tiled)]
  kernels::Matrix attn_gate;       ///< {n_embd, d_inner}: z
  kernels::Matrix ssm_beta;        ///< {n_embd, n_v_heads}
  kernels::Matrix ssm_alpha;       ///< {n_embd, n_v_heads}
  kernels::Matrix ssm_out;         ///< {d_inner, n_embd}
  std::vector<float> ssm_dt_bias;  ///< {n_v_heads}
  std::vector<float> ssm_a;        ///< {n_v_heads}, always -exp(A_log) after load
  std::vector<float> ssm_conv1d;   ///< {K, conv_dim}: channel c taps at [c*K, c*K+K)
  std::vector<float> ssm_norm;     ///< {d_state}, NOT +1 (gated RMSNorm weight, as stored)

  // Mixture of experts.
  kernels::Matrix ffn_gate_inp;           ///< router {n_embd, n_expert}
  ExpertTensor ffn_gate_exps;             ///< {n_embd, n_ff_exp, n_expert}
  ExpertTensor ffn_up_exps;               ///< {n_embd, n_ff_exp, n_expert}
  ExpertTensor ffn_down_exps;             ///< {n_ff_exp, n_embd, n_expert}
  std::vector<float> ffn_gate_inp_shexp;  ///< {n_embd}: shared-expert gate logit weights
  kernels::Matrix ffn_gate_shexp;         ///< {n_embd, n_ff_shexp}
  kernels::Matrix ffn_up_shexp;           ///< {n_embd, n_ff_shexp}
  kernels::Matrix ffn_down_shexp;         ///< {n_ff_shexp, n_embd}

  // One list for the const and mutable accessors below (Self deduces the constness).
  template <class Self>
  static auto Dense(Self& L) {
    return std::array{&L.attn_q,        &L.attn_k,       &L.attn_v,         &L.attn_output,
                      &L.attn_qkv,      &L.attn_gate,    &L.ssm_beta,       &L.ssm_alpha,
                      &L.ssm_out,       &L.ffn_gate_inp, &L.ffn_gate_shexp, &L.ffn_up_shexp,
                      &L.ffn_down_shexp};
  }
  template <class Self>
  static auto Stacks(Self& L) {
    return std::array{&L.ffn_gate_exps, &L.ffn_up_exps, &L.ffn_down_exps};
  }
  /// Every 2-D matrix of the layer (those of the other layer kind have data == nullptr), and the
  /// three routed-expert stacks: the one list that load-time passes over the weights walk.
  std::array<const kernels::Matrix*, 13> DenseMatrices() const { return Dense(*this); }
  std::array<kernels::Matrix*, 13> DenseMatrices() { return Dense(*this); }
  std::array<const ExpertTensor*, 3> ExpertStacks() const { return Stacks(*this); }
  std::array<ExpertTensor*, 3> ExpertStacks() { return Stacks(*this); }
};

/// All weights of the network.
struct Weights {
  const std::byte* token_embd = nullptr;  ///< {n_embd, n_vocab} rows, any dequantizable type
  GgmlType token_embd_type = GgmlType::kF32;
  size_t token_embd_row_bytes = 0;
  std::vector<float> output_norm;  ///< {n_embd}
  kernels::Matrix output;          ///< {n_embd, n_vocab}; token_embd when output.weight is absent
  std::vector<LayerWeights> layers;
  LayoutReport layout;
  /// Owns the matrices' repacked copies when an executor made them (the CPU executor's
  /// RepackWeights, on its own copy of these views); shared by copies of this struct.
  std::shared_ptr<std::byte[]> packed_storage;
};

/// Finds, checks and prepares every tensor. `hp.n_vocab` is set from token_embd's row count.
/// Checks: every required tensor present with the exact shape (ggml order) implied by `hp`;
/// matrices of a type the kernels multiply (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K); vectors of a
/// dequantizable type. Quirks resolved here (logged once): official layout's raw A_log -> -exp,
/// diffusion-only tensors recognised and left unused, nextn (MTP) blocks ignored.
/// Throws crossword::Error naming the tensor, expected vs actual shape/type, and what to do.
Weights LoadWeights(const gguf::File& file, Hparams& hp, const Logger& logger);

}  // namespace crossword::model
