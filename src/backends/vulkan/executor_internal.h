// Private parts of the Vulkan executor shared by executor.cc (upload, states, passes) and
// executor_record.cc (the recorded forward pass): device weights per layer and the pass scratch.
#pragma once

#include <cstdint>

#include "backends/vulkan/executor.h"
#include "backends/vulkan/ops.h"

namespace crossword::vulkan {

/// One trunk layer's weights on the device (model::LayerWeights in the file's types; the MoE
/// gate and up stacks fused per expert as the MoE kernels read them).
struct VulkanExecutor::Layer {
  bool recurrent = false;
  BufferView attn_norm, post_attention_norm;  // f32 [n_embd]
  // Gated attention.
  DeviceMatrix attn_q, attn_k, attn_v, attn_output;
  BufferView attn_q_norm, attn_k_norm;  // f32 [head_dim]
  // Gated DeltaNet.
  DeviceMatrix attn_qkv, attn_gate, ssm_beta, ssm_alpha, ssm_out;
  BufferView ssm_dt_bias, ssm_a;  // f32 [n_v_heads]
  BufferView ssm_conv1d;          // f32 [conv_dim][K]
  BufferView ssm_norm;            // f32 [d_state]
  // Mixture of experts.
  DeviceMatrix ffn_gate_inp;      // router {n_embd, n_expert}
  DeviceMatrix gate_up_exps;      // {n_embd, 2 n_ff_exp, n_expert}: per expert gate rows, up rows
  DeviceMatrix down_exps;         // {n_ff_exp, n_embd, n_expert}
  DeviceMatrix gate_up_shexp;     // {n_embd, 2 n_ff_shexp}
  DeviceMatrix down_shexp;        // {n_ff_shexp, n_embd}
  BufferView ffn_gate_inp_shexp;  // f32 [n_embd]
};

/// Activations of one pass of up to T = max_tokens tokens and R = max_logit_rows logit rows
/// (f32 unless noted; row strides are the row lengths given).
struct VulkanExecutor::Scratch {
  BufferView ids;            // host-visible int32 [T]: the pass's token ids
  BufferView x, h, cur;      // [T][n_embd]: residual stream, normed input, layer output
  BufferView qkv, conv;      // [T][conv_dim]: GDN projection, conv + SiLU (+ L2 on q, k) output
  BufferView z, o;           // [T][d_inner]: GDN output gate, recurrence output
  BufferView b, a, g, beta;  // [T][n_v_heads]: beta/alpha logits, gates
  BufferView conv_state, ssm_state;  // one GDN layer's states (denoise passes run on copies)
  BufferView qg;                     // [T][n_head][q (hd) | gate (hd)]
  BufferView kk, vv;                 // [T][n_head_kv * hd]
  BufferView ao;                     // [T][n_head * hd]
  BufferView attn;                   // AttentionScratchFloats(T, n_head, 32, hd)
  BufferView router;                 // [T][n_expert]
  BufferView topk_ids, topk_w;       // int32 / f32 [T][k]
  BufferView group;                  // MoeGroupLayoutFor(T, k, n_expert) int32 words
  BufferView hff;                    // [T*k][n_ff_exp]: SwiGLU of the routed experts
  BufferView hsh;                    // [T][n_ff_shexp]: SwiGLU of the shared expert
  BufferView down;                   // [T*k][n_embd]
  BufferView sh;                     // [T][n_embd]
  BufferView xq0, xqk;               // int8 activations, Q8_0 and Q8_K formats
  BufferView outh;                   // [R][n_embd]: final-normed rows
  BufferView logits;                 // host-visible [R][n_vocab]
  BufferView hidden;  // host-visible [T][n_embd]: the residual stream handed to the CPU (split)
};

}  // namespace crossword::vulkan
