// The CPU executor's sequence state: the attention KV cache and the Gated DeltaNet conv/SSM states
// in host memory, the recording of a pass for rollback, and its replay on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "model/forward.h"
#include "model/hparams.h"

namespace crossword::backends::cpu {

/// Host memory of one sequence (model::SequenceState holds the bookkeeping). Owns its memory
/// (allocated in the constructor; no allocation afterwards except by SaveSnapshot into a
/// snapshot without a payload of this shape).
///
/// Memory (units: bytes): KV = n_attention_layers x n_ctx x 2 x n_head_kv x head_dim x
/// (2 for F16, 4 for F32); GDN = n_recurrent_layers x ((K-1) x conv_dim + n_v_heads x d_state^2)
/// x 4; recording for rollback adds per GDN layer its state again plus max_record_tokens x
/// (2 x conv_dim + 2 x n_v_heads) x 4 (see docs/decoding.md, "GDN rollback by replay").
class CpuState final : public model::SequenceState {
 public:
  /// `pool` runs the rollback replay; it belongs to the executor and outlives the state.
  /// Throws crossword::Error on bad options or when the memory cannot be had.
  CpuState(const model::Executor& executor, const model::Hparams& hp,
           const model::StateOptions& options, ThreadPool& pool);

  size_t MemoryBytes() const override;

  /// KV rows of attention layer `a` (0-based among attention layers): row p at
  /// + p * kv_row_elems, elements of kv_type().
  void* k_cache(int a) { return kv_.data() + KvOffset(a, 0); }
  void* v_cache(int a) { return kv_.data() + KvOffset(a, 1); }
  int64_t kv_row_elems() const { return kv_row_elems_; }
  /// GDN layer `r` (0-based among recurrent layers): conv state [K-1][conv_dim], ssm
  /// [n_v_heads][d_state (v)][d_state (k)].
  float* conv_state(int r) { return gdn_.data() + r * gdn_layer_floats_; }
  const float* conv_state(int r) const { return gdn_.data() + r * gdn_layer_floats_; }
  float* ssm_state(int r) { return conv_state(r) + conv_floats_; }
  int64_t conv_floats() const { return conv_floats_; }
  int64_t ssm_floats() const { return ssm_floats_; }
  /// Recording buffers of GDN layer r for a pass of up to max_record_tokens tokens.
  struct Record {
    float* conv0;     ///< [K-1][conv_dim] conv state before the pass
    float* ssm0;      ///< [n_v_heads][d_state][d_state] ssm state before the pass
    float* qkv;       ///< [T][conv_dim] conv inputs
    float* qkv_conv;  ///< [T][conv_dim] conv+silu outputs with q,k L2-normalized
    float* g;         ///< [T][n_v_heads] log decay
    float* beta;      ///< [T][n_v_heads] write strength
  };
  Record record(int r);

 private:
  void ResetRecurrent() override;
  void SaveRecurrent(std::unique_ptr<model::SnapshotPayload>& payload) const override;
  bool RecurrentFits(const model::SnapshotPayload& payload) const override;
  void RestoreRecurrent(const model::SnapshotPayload& payload) override;
  void ReplayRecurrent(int64_t n_keep) override;
  size_t KvOffset(int a, int kv) const;

  model::Hparams hp_;  // a copy of the shape, so the state needs nothing else to replay
  ThreadPool& pool_;
  int64_t kv_row_elems_;
  size_t kv_elem_bytes_;
  std::vector<std::byte> kv_;
  int64_t conv_floats_, ssm_floats_, gdn_layer_floats_;
  std::vector<float> gdn_;  // all GDN layers: conv then ssm state, layer by layer
  int64_t rec_layer_floats_ = 0;
  std::vector<float> rec_;
  std::vector<float> rec_out_;  // replay output scratch [max_rec][d_inner]
};

}  // namespace crossword::backends::cpu
