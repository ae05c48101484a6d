// Per-sequence state of the network: the attention KV cache and the Gated DeltaNet conv/SSM
// states, with snapshot/restore and replay-based rollback for speculative verification.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "core/types.h"
#include "model/hparams.h"

namespace crossword::model {

struct StateOptions {
  int64_t n_ctx = 4096;  ///< KV capacity in tokens (prompt + answer + one block of scratch)
  GgmlType kv_type = GgmlType::kF16;  ///< F16 (default, as llama.cpp) or F32
  int64_t max_record_tokens = 0;  ///< > 0 enables RollbackTo() for passes of up to this many tokens
};

/// A copy of a sequence's recurrent state at some length (the KV rows below n_past are shared
/// with the live state, which is why Restore checks they were not rewritten since).
struct StateSnapshot {
  int64_t n_past = -1;
  uint64_t generation = 0;
  std::vector<float> gdn;  ///< all GDN layers: conv then ssm state, layer by layer
  bool valid() const { return n_past >= 0; }
};

/// The committed state of one sequence. Owns its memory (allocated in the constructor; no
/// allocation afterwards except by SaveSnapshot on first use of a snapshot object).
///
/// Memory (units: bytes): KV = n_attention_layers x n_ctx x 2 x n_head_kv x head_dim x
/// (2 for F16, 4 for F32); GDN = n_recurrent_layers x ((K-1) x conv_dim + n_v_heads x d_state^2)
/// x 4; recording for rollback adds per GDN layer its state again plus max_record_tokens x
/// (2 x conv_dim + 2 x n_v_heads) x 4 (see docs/decoding.md, "GDN rollback by replay").
class SequenceState {
 public:
  /// Throws crossword::Error if n_ctx < 1, kv_type is not F16/F32, or memory cannot be had.
  SequenceState(const Hparams& hp, const StateOptions& options);
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;

  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return n_ctx_; }
  GgmlType kv_type() const { return kv_type_; }
  size_t MemoryBytes() const;

  /// Back to an empty sequence (n_past 0, zero GDN state). Invalidates all snapshots.
  void Reset();

  /// Copies the recurrent state and n_past into `snapshot` (reusing its buffer).
  void SaveSnapshot(StateSnapshot& snapshot) const;
  /// Returns to `snapshot`. Throws crossword::Error if KV rows below snapshot.n_past have been
  /// rewritten since it was taken (the sequence diverged before that point) or it came from a
  /// state of another shape.
  void Restore(const StateSnapshot& snapshot);
  /// Whether Restore(snapshot) would succeed.
  bool CanRestore(const StateSnapshot& snapshot) const;

  /// Rewinds the last recorded causal pass (Batch input with record = true) so that only its
  /// first `n_keep` tokens stay committed: KV truncated, GDN state rebuilt by replaying the
  /// recorded recurrence inputs over those tokens. 0 <= n_keep <= tokens of that pass. Throws
  /// crossword::Error if nothing was recorded or n_keep is out of range. Allocates nothing.
  void RollbackTo(int64_t n_keep, ThreadPool& pool);
  /// Length of the recorded pass (0 if none).
  int64_t recorded_tokens() const { return rec_T_; }

  // ---- Access for the forward pass (model internals) ----------------------------------------
  /// KV rows of attention layer `a` (0-based among attention layers): row p at + p * kv_row_elems.
  void* k_cache(int a) { return kv_.data() + KvOffset(a, 0); }
  void* v_cache(int a) { return kv_.data() + KvOffset(a, 1); }
  int64_t kv_row_elems() const { return kv_row_elems_; }
  /// GDN layer `r` (0-based among recurrent layers): conv state [K-1][conv_dim], ssm [n_v][dv][dk].
  float* conv_state(int r) { return gdn_.data() + r * gdn_layer_floats_; }
  float* ssm_state(int r) { return conv_state(r) + conv_floats_; }
  int64_t conv_floats() const { return conv_floats_; }
  int64_t ssm_floats() const { return ssm_floats_; }
  /// Recording buffers of GDN layer r for a pass of up to max_record_tokens tokens.
  struct Record {
    float* conv0;     ///< conv state before the pass
    float* ssm0;      ///< ssm state before the pass
    float* qkv;       ///< [T][conv_dim] conv inputs
    float* qkv_conv;  ///< [T][conv_dim] conv+silu outputs with q,k L2-normalized
    float* g;         ///< [T][n_v_heads]
    float* beta;      ///< [T][n_v_heads]
  };
  Record record(int r);
  int64_t max_record_tokens() const { return max_rec_; }

  /// Called by the forward pass before writing KV rows [pos, pos + T) (for snapshot validity).
  void NoteKvWrite(int64_t pos, int64_t T);
  /// Called by the forward pass after a committing pass of T tokens (record: RollbackTo-able).
  void Advance(int64_t T, bool recorded);

 private:
  size_t KvOffset(int a, int kv) const;

  Hparams hp_;  // a copy: states may outlive nothing but their own shape
  int64_t n_ctx_;
  GgmlType kv_type_;
  int64_t n_past_ = 0;
  int64_t kv_row_elems_;
  size_t kv_elem_bytes_;
  std::vector<std::byte> kv_;
  int64_t conv_floats_, ssm_floats_, gdn_layer_floats_;
  std::vector<float> gdn_;
  // Snapshot validity: every rewrite of KV rows below the high-water mark bumps generation_
  // and logs the position; a snapshot at n is valid while no rewrite since touched rows < n.
  // 4096: decoding after a restored checkpoint rewrites one row per token, and a multi-turn chat
  // must keep its earlier checkpoints across an answer of a few thousand tokens (32 KiB per state).
  static constexpr int kRewriteLog = 4096;
  uint64_t generation_ = 1;
  int64_t high_water_ = 0;
  std::array<int64_t, kRewriteLog> rewrite_pos_{};  // indexed by generation % kRewriteLog
  // Rollback recording.
  int64_t max_rec_ = 0;
  int64_t rec_T_ = 0;      // tokens of the recorded pass (0: none)
  int64_t rec_start_ = 0;  // n_past before it
  int64_t rec_layer_floats_ = 0;
  std::vector<float> rec_;
  std::vector<float> rec_out_;  // replay output scratch [max_rec][d_inner]
};

}  // namespace crossword::model
