// The backend-neutral forward contract: what decode, engine, server and cli see of a forward pass.
// An Executor (src/backends/<name>) runs passes of one loaded Model on one device; it hands out
// the per-sequence states and the scratch contexts those passes use. docs/architecture.md shows
// where the pieces sit; docs/model.md specifies the network the passes compute.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"
#include "model/hparams.h"

namespace crossword {
class ThreadPool;
}  // namespace crossword

namespace crossword::model {

class Executor;
class Model;

/// How one sequence's tokens are processed in a forward pass (docs/decoding.md).
enum class PassKind : uint8_t {
  /// Causal attention over prefix + these tokens; KV appended, GDN state advanced (commits).
  kCausal,
  /// Read-only block pass: attention sees the whole committed prefix and the whole block
  /// (bidirectional inside the block); GDN runs causally from the committed state into scratch.
  /// Nothing is committed.
  kDenoise,
};

/// Which rows of a sequence's tokens get logits.
enum class LogitRows : uint8_t { kLast, kAll, kNone };

/// Sizes of one sequence's state (Executor::NewState).
struct StateOptions {
  int64_t n_ctx = 4096;  ///< KV capacity in tokens (prompt + answer + one block of scratch)
  GgmlType kv_type = GgmlType::kF16;  ///< F16 (default, as llama.cpp) or F32
  int64_t max_record_tokens = 0;  ///< > 0 enables RollbackTo() for passes of up to this many tokens
};

/// Sizes of one forward context (Executor::NewContext): the most one pass may hold.
struct ContextOptions {
  int64_t max_tokens = 512;     ///< tokens per forward pass, summed over sequences
  int max_seqs = 1;             ///< sequences per forward pass
  int64_t max_logit_rows = 64;  ///< logit rows per forward pass, summed over sequences
};

/// Recurrent (GDN) state of a sequence kept by a snapshot; each executor derives its own (host
/// memory for the CPU, device memory for a GPU). Opaque to everything above the executor.
class SnapshotPayload {
 public:
  virtual ~SnapshotPayload() = default;
  /// Bytes held (host or device), for cache accounting.
  virtual size_t MemoryBytes() const = 0;
};

/// A payload in host memory: every GDN layer's conv then SSM state as floats, layer by layer (the
/// CPU executor's form; a GPU executor may read its states back into it).
class HostSnapshot final : public SnapshotPayload {
 public:
  size_t MemoryBytes() const override { return gdn.size() * sizeof(float); }
  std::vector<float> gdn;
};

/// A sequence's recurrent state at some length n_past. The KV rows below n_past are not copied:
/// they are shared with the live state, which is why Restore checks they were not rewritten
/// since. Move-only; an empty snapshot (n_past < 0) is invalid. Fill with
/// SequenceState::SaveSnapshot, which reuses the payload of a snapshot taken from the same
/// executor.
struct StateSnapshot {
  int64_t n_past = -1;
  uint64_t generation = 0;  ///< the state's rewrite counter when taken (validity check)
  std::unique_ptr<SnapshotPayload> payload;
  bool valid() const { return n_past >= 0 && payload != nullptr; }
};

/// The committed state of one sequence (KV cache of the attention layers, conv and SSM state of
/// the GDN layers) on the device of the executor that made it (Executor::NewState). Owned by the
/// caller; it must not outlive its executor. Not thread-safe: one thread uses a state at a time,
/// and never while a Forward that includes it runs.
///
/// This base class keeps the semantics every backend shares (the committed length, snapshot
/// validity, what a recorded pass allows), so that all executors accept and refuse the same
/// calls; the storage and the arithmetic of reset, snapshot, restore and rollback are the
/// executor's (the protected virtuals).
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;

  /// The executor that made this state (Forward refuses states of another executor).
  const Executor& executor() const { return *executor_; }
  /// Committed tokens (positions [0, n_past) hold them).
  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return n_ctx_; }
  GgmlType kv_type() const { return kv_type_; }
  int64_t max_record_tokens() const { return max_rec_; }
  /// Length of the recorded pass RollbackTo can cut (0 if none).
  int64_t recorded_tokens() const { return rec_T_; }
  /// Bytes this state holds (host or device memory).
  virtual size_t MemoryBytes() const = 0;

  /// Back to an empty sequence (n_past 0, zero GDN state). Invalidates all snapshots.
  void Reset();
  /// Copies the recurrent state and n_past into `snapshot` (reusing its payload when it came from
  /// this executor and has the same shape; allocates otherwise).
  void SaveSnapshot(StateSnapshot& snapshot) const;
  /// Whether Restore(snapshot) would succeed.
  bool CanRestore(const StateSnapshot& snapshot) const;
  /// Returns to `snapshot`. Throws crossword::Error if KV rows below snapshot.n_past have been
  /// rewritten since it was taken (the sequence diverged before that point), or it came from a
  /// state of another shape or executor.
  void Restore(const StateSnapshot& snapshot);
  /// Rewinds the last recorded causal pass (SequenceInput.record = true) so that only its first
  /// `n_keep` tokens stay committed: KV truncated, GDN state rebuilt by replaying the recorded
  /// recurrence inputs over those tokens (docs/decoding.md, "GDN rollback by replay"). Runs on
  /// the executor's device, under the same one-pass-at-a-time rule as Forward. Throws
  /// crossword::Error if nothing was recorded or n_keep is outside [0, recorded_tokens()].
  /// Allocates nothing.
  void RollbackTo(int64_t n_keep);

  // ---- For executors (the forward pass) ------------------------------------------------------
  /// Call before writing KV rows [pos, pos + T) (keeps snapshot validity).
  void NoteKvWrite(int64_t pos, int64_t T);
  /// Call after a committing pass of T tokens (recorded: RollbackTo may cut it).
  void Advance(int64_t T, bool recorded);

 protected:
  /// Throws crossword::Error if n_ctx < 1, kv_type is not F16/F32 or max_record_tokens < 0.
  SequenceState(const Executor& executor, const StateOptions& options);
  /// Zero the recurrent state.
  virtual void ResetRecurrent() = 0;
  /// Copy the recurrent state into `payload` (null or of another shape: make a new one).
  virtual void SaveRecurrent(std::unique_ptr<SnapshotPayload>& payload) const = 0;
  /// Whether `payload` has this state's shape (and belongs to this executor).
  virtual bool RecurrentFits(const SnapshotPayload& payload) const = 0;
  /// Copy `payload` (RecurrentFits) back into the recurrent state.
  virtual void RestoreRecurrent(const SnapshotPayload& payload) = 0;
  /// Rebuild the recurrent state from the recording of the last pass so that it holds its first
  /// n_keep tokens, 0 <= n_keep < recorded_tokens() (checked by RollbackTo).
  virtual void ReplayRecurrent(int64_t n_keep) = 0;

 private:
  const Executor* executor_;
  int64_t n_ctx_;
  GgmlType kv_type_;
  int64_t max_rec_;
  int64_t n_past_ = 0;
  // Snapshot validity: every rewrite of KV rows below the high-water mark bumps generation_
  // and logs the position; a snapshot at n is valid while no rewrite since touched rows < n.
  // 4096: decoding after a restored checkpoint rewrites one row per token, and a multi-turn chat
  // must keep its earlier checkpoints across an answer of a few thousand tokens (32 KiB per state).
  static constexpr int kRewriteLog = 4096;
  uint64_t generation_ = 1;
  int64_t high_water_ = 0;
  std::array<int64_t, kRewriteLog> rewrite_pos_{};  // indexed by generation % kRewriteLog
  int64_t rec_T_ = 0;                               // tokens of the recorded pass (0: none)
  int64_t rec_start_ = 0;                           // n_past before it
};

/// One sequence's part of a batch: T = tokens.size() tokens at positions
/// state->n_past() + [0, T). Rows of the batch are the sequences' tokens in input order.
struct SequenceInput {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;  ///< token ids (the mask id for masked diffusion slots)
  PassKind kind = PassKind::kCausal;
  LogitRows logits = LogitRows::kLast;
  /// Causal passes only: record GDN inputs so state->RollbackTo(n) can keep a prefix of them.
  bool record = false;
  /// kAll only, optional (empty: every row): one flag per token; rows whose flag is 0 get no
  /// logits (their n_vocab floats are left unspecified, the output head skips them; where the
  /// executor computes_more_logits(), Executor::MoreLogits can compute them after the pass). The
  /// layout stays row i at i * n_vocab. A denoise pass needs only the rows of still-masked slots;
  /// a chunked verify pass the rows of its first chunk.
  std::span<const uint8_t> need_rows = {};
  /// Denoise passes only, optional (0: off): the rows from this index on route only among the
  /// experts the rows before it selected (top-k of the router's softmax inside that set,
  /// renormalized), so they add no expert bytes to the pass. For spec drafts: [seed, MASK x d]
  /// with 1 here reads the seed's k experts only. Changes the draft, never a verify pass.
  int32_t expert_anchor_rows = 0;
  /// Causal passes only, optional (0: off; needs Executor::fuses_passes()): a fused pass. The
  /// last `denoise_tail` tokens (< T) are a read-only denoise block that starts right after the
  /// pass's causal tokens: they attend to the whole prefix (the causal tokens of this pass
  /// included) and bidirectionally among themselves; GDN runs over them causally from the state
  /// after the causal tokens, into scratch; their KV rows are scratch. Only the first
  /// T - denoise_tail tokens are committed (and recorded). Every row gets exactly the values the
  /// causal pass of the first tokens followed by a denoise pass of the tail would give
  /// (docs/decoding.md, "Fused passes"). Logit rows, kAll and need_rows cover all T tokens.
  int32_t denoise_tail = 0;
  /// Denoise passes only, optional (0: off; needs Executor::skips_ffn()): bit l set skips layer
  /// l's FFN block (router, routed and shared experts) for this sequence's rows, whose residual
  /// stream then passes through that layer's FFN unchanged; bits from n_layer - 1 on must be 0
  /// (the last layer's FFN feeds the head). For spec drafts: layer-skipping self-speculation
  /// (Draft & Verify, Zhang et al. 2023, arXiv:2309.08168) gives a cheaper, rougher draft; a verify
  /// pass never skips, so the output is unchanged. docs/decoding.md, "Draft passes that skip FFN
  /// blocks".
  uint64_t skip_ffn_layers = 0;
};

/// What the last forward pass on a context did (filled by executors that count it; zeros
/// otherwise).
struct PassCounters {
  /// Distinct routed experts used, summed over the MoE layers (the expert union U(T) of
  /// ../shared/parallel-decoding-notes.md section 2, times the layer count).
  int64_t experts_used = 0;
  int moe_layers = 0;     ///< MoE layers counted; experts_used / moe_layers = U per layer
  int64_t head_rows = 0;  ///< output-head rows computed (fewer than the logit rows with need_rows)
  /// Rows the last layer's row-independent part (output projection, MoE) ran on: the pass's
  /// rows, or fewer where the executor skips rows whose output nothing reads
  /// (CpuExecutor::KeepOutputRows). -1: not counted (the executor does not say).
  int64_t last_layer_rows = -1;
};

/// Scratch memory of forward passes (activations, routing, logits), sized once by
/// Executor::NewContext so that a pass allocates nothing. One context per thread that runs
/// forward passes; it must not outlive its executor.
class ForwardContext {
 public:
  virtual ~ForwardContext() = default;
  ForwardContext(const ForwardContext&) = delete;
  ForwardContext& operator=(const ForwardContext&) = delete;

  const Executor& executor() const { return *executor_; }
  const ContextOptions& options() const { return options_; }
  /// Logits of sequence `s` (index into the last pass's inputs), in host memory: rows as
  /// requested (kLast: 1 row; kAll: T rows; kNone: none), each n_vocab floats, row i at
  /// data() + i * n_vocab. Valid until the next Forward on this context. Throws crossword::Error
  /// for an `s` outside [0, options().max_seqs).
  virtual std::span<const float> logits(int s) const = 0;
  /// Rows logits(s) holds.
  virtual int64_t n_logit_rows(int s) const = 0;
  /// Counters of the last pass (PassCounters).
  const PassCounters& counters() const { return counters_; }
  int64_t experts_used() const { return counters_.experts_used; }
  int moe_layers() const { return counters_.moe_layers; }
  int64_t head_rows() const { return counters_.head_rows; }
  int64_t last_layer_rows() const { return counters_.last_layer_rows; }
  /// For executors: the counters they fill during a pass.
  PassCounters& mutable_counters() { return counters_; }

 protected:
  ForwardContext(const Executor& executor, const ContextOptions& options)
      : executor_(&executor), options_(options) {}

 private:
  const Executor* executor_;
  ContextOptions options_;
  PassCounters counters_;
};

/// A named intermediate of a forward pass, reported to a ForwardObserver: `rows` x `cols` floats,
/// row-major in host memory, one row per token of the batch (sequences in input order) unless
/// the name says otherwise (docs/model.md, "Named intermediates"). Valid during the call only.
struct TensorView {
  std::string_view name;  ///< e.g. "attn_norm", "ffn_out", "l_out", "result_output"
  int layer = -1;         ///< trunk layer, or -1 outside the layer loop (embedding, output head)
  int64_t rows = 0;
  int64_t cols = 0;
  const float* data = nullptr;
};

/// Receives named intermediates during Forward (debugging and backend comparison, as llama.cpp's
/// eval callback). Called on the thread that runs Forward, in pass order; an executor that
/// computes on a device copies the tensor to the host first, so passes with an observer are slow.
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  /// Whether the pass should produce `name` of `layer` (an executor skips the copy otherwise).
  virtual bool Wants(std::string_view name, int layer) const = 0;
  virtual void OnTensor(const TensorView& tensor) = 0;
};

/// Runs forward passes of one loaded Model on one device. Executors are made by the registry
/// (src/backends/registry.h) by name ("cpu", "vulkan"). An executor owns its device resources
/// (the CPU executor its ThreadPool, a GPU executor its device, queues and uploaded weights).
///
/// Threading: NewState / NewContext may be called from any thread. Forward and
/// SequenceState::RollbackTo run one at a time per executor (callers take turns); the
/// states and context of a running pass must not be touched by other threads.
class Executor {
 public:
  virtual ~Executor() = default;

  /// The network these passes compute (hyperparameters, tensors, file).
  virtual const Model& model() const = 0;
  const Hparams& hparams() const;
  /// The registry name: "cpu", "vulkan".
  virtual std::string_view name() const = 0;
  /// A short line for logs and benchmarks' "backend" column: device, driver or SIMD target,
  /// layers placed (threads are host_threads()).
  virtual std::string Describe() const = 0;
  /// Host threads this executor computes on (the CPU executor's pool; a GPU executor's threads
  /// for the layers it leaves on the CPU, or 1).
  virtual int host_threads() const = 0;
  /// The host threads' pool for work between passes (the decoder's per-row scans of a pass's
  /// logits), or null when this executor has none (that work then runs on the calling thread).
  /// Used only between Forward calls, by whoever holds the executor's turn.
  virtual ThreadPool* host_pool() const { return nullptr; }
  /// Whether Forward runs fused passes (SequenceInput::denoise_tail > 0); false: it refuses them.
  virtual bool fuses_passes() const { return false; }
  /// Whether Forward honours SequenceInput::skip_ffn_layers; false: it refuses them.
  virtual bool skips_ffn() const { return false; }
  /// Whether MoreLogits works on this executor's contexts.
  virtual bool computes_more_logits() const { return false; }

  /// A state sized for this model on this device. Throws crossword::Error on bad options or when
  /// the memory cannot be had (naming the bytes needed).
  virtual std::unique_ptr<SequenceState> NewState(const StateOptions& options) const = 0;
  /// A context holding passes up to `options`. Throws crossword::Error on options < 1 or memory.
  virtual std::unique_ptr<ForwardContext> NewContext(const ContextOptions& options) const = 0;

  /// Runs one forward pass over `seqs` (at most ctx.options().max_seqs of them, at most
  /// max_tokens tokens and max_logit_rows logit rows in total); logits land in ctx. Causal inputs
  /// commit their tokens to their state; denoise inputs leave it unchanged. Throws
  /// crossword::Error, before touching any state (ValidateBatch), on: a token id outside
  /// [0, n_vocab), a pass overflowing a state's n_ctx, an empty input, more tokens/rows/sequences
  /// than the context holds, record without recording room, the same state twice in one batch,
  /// a state or context of another executor. Never allocates (an observer may make it copy).
  virtual void Forward(std::span<const SequenceInput> seqs, ForwardContext& ctx,
                       ForwardObserver* observer = nullptr) const = 0;

  /// After a Forward on `ctx`: computes the logits of rows [begin, end) of sequence `s` of that
  /// pass (a causal kAll pass), rows the pass skipped through need_rows, from the final hidden
  /// states the context kept; they land where the pass would have put them (ctx.logits(s) row i
  /// at i * n_vocab) and count as head rows. Valid until the next Forward on ctx; the states are
  /// not touched. A spec verify pass computes its logit rows in chunks this way and stops at the
  /// first rejected draft (docs/decoding.md, "Fewer head rows"). Throws crossword::Error when the
  /// executor cannot (computes_more_logits() false), for a context of another executor, a
  /// sequence outside the last pass, a denoise pass, a pass without kAll or with a fused tail,
  /// or a row range outside [0, T). (Of the other passes an executor may skip the last layer's
  /// rows that get no logits: CpuExecutor::KeepOutputRows.)
  virtual void MoreLogits(ForwardContext& ctx, int s, int64_t begin, int64_t end) const;
};

/// Totals of a validated batch.
struct BatchTotals {
  int64_t tokens = 0;
  int64_t logit_rows = 0;
};

/// The checks every executor's Forward makes before it touches any state (see Executor::Forward);
/// shared so that all backends refuse the same inputs with the same messages. Throws
/// crossword::Error naming the sequence and the limit.
BatchTotals ValidateBatch(const Executor& executor, std::span<const SequenceInput> seqs,
                          const ForwardContext& ctx);

/// The layers whose FFN block a pass may skip (SequenceInput::skip_ffn_layers) in a model of
/// `n_layer` layers, as a mask: every one below the last (whose FFN feeds the head), up to
/// layer 63.
inline uint64_t SkippableFfnLayers(int n_layer) {
  return n_layer <= 1 ? 0 : n_layer > 64 ? ~uint64_t{0} : (uint64_t{1} << (n_layer - 1)) - 1;
}

/// The layer numbers of a layer mask, in ascending order.
inline std::vector<int> MaskLayers(uint64_t mask) {
  std::vector<int> layers;
  for (int l = 0; l < 64; ++l) {
    if (mask >> l & 1) layers.push_back(l);
  }
  return layers;
}

/// Logit rows a sequence of T tokens gets.
inline int64_t LogitRowCount(LogitRows rows, int64_t T) {
  return rows == LogitRows::kAll ? T : rows == LogitRows::kLast ? 1 : 0;
}

}  // namespace crossword::model
