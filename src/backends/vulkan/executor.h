// The Vulkan executor: the clover_moe / qwen35moe forward pass (src/model/model.cc and
// layers.cc, mirrored op for op) on a Vulkan device. Weights are uploaded once from the
// mapped GGUF in the file's own types; each sequence's KV cache (f16) and Gated DeltaNet
// conv / SSM states live on the device; one command list is recorded per pass shape (tokens,
// pass kind, logit rows, recording) and replayed with the position in a parameter slot.
// docs/gpu.md, "Executor".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backends/vulkan/commands.h"
#include "backends/vulkan/device.h"
#include "backends/vulkan/memory.h"
#include "model/model.h"

namespace crossword::vulkan {

struct ExecutorOptions {
  /// Tokens of one recorded pass: longer causal inputs run in chunks of this many tokens (a
  /// denoise block or a recorded pass must fit one chunk).
  int64_t max_tokens = 32;
  /// Logit rows of one pass (kAll over a chunk needs max_tokens).
  int64_t max_logit_rows = 32;
  /// Reduction and mat-vec paths of every recording (tests force them).
  OpConfig ops;
  /// Upload progress: bytes done, total (called after each staging chunk).
  std::function<void(uint64_t done, uint64_t total)> progress;
  /// Recorded command lists kept per sequence state (one per pass shape; the oldest is dropped
  /// and re-recorded when needed).
  int max_recorded_shapes = 8;
  /// Device memory the executor may plan for (bytes; 0: the device's device-local heap). The
  /// fit check compares the weights and pass scratch against it.
  uint64_t memory_limit = 0;
  /// Speed tests only: the matrices are not read from the file but generated on the device
  /// (SynthWeights noise from this seed) and the small vectors set to plain constants (norms 1,
  /// ssm_a -0.5, the rest 0 or 0.1), so a model of any size runs from a sparse file
  /// (gguf synth --sparse). 0: off (weights from the file).
  uint32_t generate_weights_seed = 0;
};

/// Device memory a model needs (bytes), computed before anything is allocated.
struct DeviceFootprint {
  uint64_t weights = 0;
  uint64_t scratch = 0;  ///< activations, logits, quantized activations of one pass
  uint64_t total() const { return weights + scratch; }
};

class VulkanExecutor;

/// One sequence's state on the device: the f16 KV cache of each attention layer, the conv and
/// SSM states of each GDN layer, the rope table for its n_ctx positions, and (with
/// max_record_tokens > 0) the recording of the last causal pass for RollbackTo. The same
/// contract as model::SequenceState (snapshots hold the GDN states in host memory). Created by
/// VulkanExecutor::NewState; must not outlive its executor.
class DeviceState {
 public:
  ~DeviceState();
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;

  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t max_record_tokens() const { return max_rec_; }
  int64_t recorded_tokens() const { return rec_T_; }
  /// Device bytes of this state.
  uint64_t MemoryBytes() const;

  /// Back to an empty sequence (zero GDN state). Invalidates every snapshot.
  void Reset();
  /// Copies the GDN states (read back from the device) and n_past into `snapshot`.
  void SaveSnapshot(model::StateSnapshot& snapshot) const;
  /// Whether Restore(snapshot) would succeed (KV rows below its n_past not rewritten since).
  bool CanRestore(const model::StateSnapshot& snapshot) const;
  /// Returns to `snapshot`. Throws crossword::Error when CanRestore is false.
  void Restore(const model::StateSnapshot& snapshot);
  /// Keeps the first n_keep tokens of the last recorded causal pass: KV truncated, conv window
  /// rebuilt from the recorded inputs, SSM state replayed from the recorded start state (one
  /// recorded command list, n_keep in a parameter slot). Throws crossword::Error when nothing
  /// was recorded or n_keep is outside [0, recorded_tokens()].
  void RollbackTo(int64_t n_keep);

  /// The GDN states as one host vector (layer by layer: conv [K-1][conv_dim] then SSM
  /// [n_v][dv][dk]), for tests that compare against model::SequenceState.
  std::vector<float> ReadGdnState() const;

 private:
  friend class VulkanExecutor;
  DeviceState(VulkanExecutor& exec, const model::StateOptions& options);
  void NoteKvWrite(int64_t pos, int64_t T);
  void Advance(int64_t T, bool recorded);

  struct GdnLayerState {
    BufferView conv, ssm;                            // live state
    BufferView conv0, ssm0, qkv, qkv_conv, g, beta;  // recording (max_rec_ > 0)
  };
  struct Key {
    int64_t T;
    int kind, rows, record;
    auto operator<=>(const Key&) const = default;
  };

  VulkanExecutor& exec_;
  int64_t n_ctx_;
  int64_t n_past_ = 0;
  int64_t max_rec_ = 0;
  int64_t rec_T_ = 0, rec_start_ = 0;
  std::unique_ptr<MemoryPool> pool_, host_pool_;
  BufferView gdn_all_;  // every live GDN state, contiguous (snapshots, reset)
  std::vector<GdnLayerState> gdn_;
  std::vector<BufferView> k_cache_, v_cache_;  // per GPU attention layer
  BufferView rope_;
  BufferView params_;  // int32 slots: 0 = n_past, 1 = n_keep (rollback)
  std::map<Key, std::unique_ptr<CommandList>> lists_;
  std::vector<Key> list_order_;  // recording order, for dropping the oldest
  std::unique_ptr<CommandList> rollback_;
  // Snapshot validity, as model::SequenceState.
  static constexpr int kRewriteLog = 4096;
  uint64_t generation_ = 1;
  int64_t high_water_ = 0;
  std::vector<int64_t> rewrite_pos_;
};

/// One sequence's part of a Forward call (model::SequenceInput with a device state).
struct DeviceInput {
  DeviceState* state = nullptr;
  std::span<const int32_t> tokens;
  model::PassKind kind = model::PassKind::kCausal;
  model::LogitRows logits = model::LogitRows::kLast;
  bool record = false;
};

/// The network on a Vulkan device. Not thread-safe: one thread runs its passes.
class VulkanExecutor {
 public:
  /// Uploads the weights of `model` (which must outlive the executor: its mapping is the upload
  /// source and its hyperparameters are shared) to `device` and sizes the pass scratch. Checks
  /// first that the model fits (Footprint against the device's memory) and throws
  /// crossword::Error saying what is needed, what the device has, and which flags help.
  VulkanExecutor(Device& device, const model::Model& model, const ExecutorOptions& options = {});
  ~VulkanExecutor();
  VulkanExecutor(const VulkanExecutor&) = delete;
  VulkanExecutor& operator=(const VulkanExecutor&) = delete;

  /// The device memory `model` needs with `options` (weights + pass scratch; states extra).
  static DeviceFootprint Footprint(const model::Model& model, const ExecutorOptions& options);
  /// Device bytes of one state (KV f16, GDN states, recording, rope table).
  static uint64_t StateBytes(const model::Hparams& hp, const model::StateOptions& options);

  Device& device() { return device_; }
  const model::Model& model() const { return model_; }
  const model::Hparams& hparams() const { return model_.hparams(); }
  const ExecutorOptions& options() const { return options_; }
  uint64_t weight_bytes() const { return weight_bytes_; }

  /// A state on the device. Only F16 KV caches (kv_type) are supported. Throws
  /// crossword::Error on bad options or when the device is out of memory (naming -c).
  std::unique_ptr<DeviceState> NewState(const model::StateOptions& options);

  /// Runs a forward pass for each input (one after the other; causal inputs longer than
  /// max_tokens run in chunks). Same checks, before touching any state, and the same results
  /// (up to summation order and the rounding of int8 activations) as model::Model::Forward.
  void Forward(std::span<const DeviceInput> seqs);
  /// Logits of input `s` of the last Forward: rows as requested, n_vocab floats each.
  std::span<const float> logits(int s) const;
  int64_t n_logit_rows(int s) const { return seq_logit_count_.at(s); }

  /// Dispatches and barriers of the command list last replayed (bench, tests).
  int last_dispatch_count() const { return last_dispatches_; }
  int last_barrier_count() const { return last_barriers_; }

 private:
  friend class DeviceState;
  struct Layer;
  struct Scratch;
  void Upload();
  void RecordPass(CommandList& cl, DeviceState& st, int64_t T, model::PassKind kind,
                  model::LogitRows rows, bool record);
  void RecordGdn(CommandList& cl, int il, int r, DeviceState& st, int64_t T, bool denoise,
                 bool record);
  void RecordAttention(CommandList& cl, int il, int a, DeviceState& st, int64_t T, bool causal);
  void RecordMoe(CommandList& cl, int il, int64_t T);
  void RecordRollback(CommandList& cl, DeviceState& st);
  CommandList& ListFor(DeviceState& st, int64_t T, model::PassKind kind, model::LogitRows rows,
                       bool record);
  void RunChunk(DeviceState& st, std::span<const int32_t> tokens, model::PassKind kind,
                model::LogitRows rows, bool record, float* logits_out);

  Device& device_;
  const model::Model& model_;
  ExecutorOptions options_;
  std::unique_ptr<MemoryPool> weights_pool_, scratch_pool_, host_pool_;
  std::vector<Layer> layers_;
  std::unique_ptr<DeviceMatrix> token_embd_, output_;
  const DeviceMatrix* output_matrix_ = nullptr;  // output_ or token_embd_ (tied)
  BufferView output_norm_;
  std::unique_ptr<Scratch> s_;
  std::vector<int> layer_slot_;  // il -> index among recurrent or attention layers
  uint64_t weight_bytes_ = 0;
  std::vector<float> logits_;
  std::vector<int64_t> seq_logit_offset_, seq_logit_count_;
  int last_dispatches_ = 0, last_barriers_ = 0;
};

}  // namespace crossword::vulkan
