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
#include "model/forward.h"
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
  /// Trunk layers on the device (-1: all). Fewer: only layers [0, n_layers) are uploaded and
  /// run, Forward is refused, and ForwardHidden hands the residual stream to the CPU executor
  /// (the split executor of -ngl N, src/backends/split.h).
  int n_layers = -1;
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
/// max_record_tokens > 0) the recording of the last causal pass for RollbackTo. The bookkeeping
/// (n_past, snapshot validity, what RollbackTo accepts) is model::SequenceState's; snapshots
/// hold the GDN states in host memory. Made by VulkanExecutor::NewState; must not outlive it.
class DeviceState final : public model::SequenceState {
 public:
  ~DeviceState() override;
  size_t MemoryBytes() const override;
  /// The GDN states as one host vector (layer by layer: conv [K-1][conv_dim] then SSM
  /// [n_v][dv][dk]), for tests that compare states.
  std::vector<float> ReadGdnState() const;

 protected:
  void ResetRecurrent() override;
  void SaveRecurrent(std::unique_ptr<model::SnapshotPayload>& payload) const override;
  bool RecurrentFits(const model::SnapshotPayload& payload) const override;
  void RestoreRecurrent(const model::SnapshotPayload& payload) override;
  /// The recorded pass's first n_keep tokens replayed on the device: the conv window rebuilt
  /// from the recorded inputs, the SSM state from the recorded start state (one recorded
  /// command list, n_keep in parameter slot 1).
  void ReplayRecurrent(int64_t n_keep) override;

 private:
  friend class VulkanExecutor;
  DeviceState(const VulkanExecutor& exec, const model::StateOptions& options);

  struct GdnLayerState {
    BufferView conv, ssm;                            // live state
    BufferView conv0, ssm0, qkv, qkv_conv, g, beta;  // recording (max_record_tokens > 0)
  };
  struct Key {
    int64_t T;
    int kind, rows, record, profile;
    uint64_t skip_ffn;
    auto operator<=>(const Key&) const = default;
  };

  const VulkanExecutor& exec_;
  std::unique_ptr<MemoryPool> pool_, host_pool_;
  BufferView gdn_all_;  // every live GDN state, contiguous (snapshots, reset)
  std::vector<GdnLayerState> gdn_;
  std::vector<BufferView> k_cache_, v_cache_;  // per attention layer
  BufferView rope_;
  BufferView params_;  // int32 slots: 0 = n_past, 1 = n_keep (rollback)
  std::map<Key, std::unique_ptr<CommandList>> lists_;
  std::vector<Key> list_order_;  // recording order, for dropping the oldest
  std::unique_ptr<CommandList> rollback_;
};

/// Logits of the last pass in host memory, per sequence (model::ForwardContext).
class VulkanContext final : public model::ForwardContext {
 public:
  VulkanContext(const VulkanExecutor& executor, const model::ContextOptions& options);
  std::span<const float> logits(int s) const override;
  int64_t n_logit_rows(int s) const override;

 private:
  friend class VulkanExecutor;
  int64_t n_vocab_;
  std::vector<float> logits_;  // [max_logit_rows][n_vocab]
  std::vector<int64_t> seq_logit_offset_, seq_logit_count_;
};

/// The network on a Vulkan device (model::Executor "vulkan"). Forward and RollbackTo run one
/// at a time (the contract's rule); the device is used by this executor's thread only.
class VulkanExecutor final : public model::Executor {
 public:
  /// Uploads the weights of `model` to `device` (which must outlive the executor) and sizes
  /// the pass scratch. Checks first that the model fits (Footprint against the device's
  /// memory) and throws crossword::Error saying what is needed, what the device has, and which
  /// flags help.
  VulkanExecutor(Device& device, std::shared_ptr<const model::Model> model,
                 const ExecutorOptions& options = {});
  /// As above on a device this executor opens and owns.
  static std::unique_ptr<VulkanExecutor> Open(std::shared_ptr<const model::Model> model,
                                              const DeviceOptions& device,
                                              const ExecutorOptions& options = {});
  ~VulkanExecutor() override;
  VulkanExecutor(const VulkanExecutor&) = delete;
  VulkanExecutor& operator=(const VulkanExecutor&) = delete;

  /// The device memory `model` needs with `options` (weights + pass scratch; states extra).
  static DeviceFootprint Footprint(const model::Model& model, const ExecutorOptions& options);
  /// Device bytes of one state (KV f16, GDN states, recording, rope table).
  static uint64_t StateBytes(const model::Hparams& hp, const model::StateOptions& options);

  // model::Executor.
  const model::Model& model() const override { return *model_; }
  std::string_view name() const override { return "vulkan"; }
  bool skips_ffn() const override { return true; }
  std::string Describe() const override;
  int host_threads() const override { return 1; }
  /// Only F16 KV caches; max_record_tokens at most ExecutorOptions::max_tokens.
  std::unique_ptr<model::SequenceState> NewState(const model::StateOptions& options) const override;
  std::unique_ptr<model::ForwardContext> NewContext(
      const model::ContextOptions& options) const override;
  /// One pass per input, one after the other; causal inputs longer than max_tokens in chunks.
  /// Observers are not supported (throws when one is given).
  void Forward(std::span<const model::SequenceInput> seqs, model::ForwardContext& ctx,
               model::ForwardObserver* observer = nullptr) const override;

  /// Split executors: runs layers [0, n_layers) over `tokens` (at most max_tokens) on `st` and
  /// writes the residual stream after them to `hidden` ([T][n_embd] floats). Commits a causal
  /// pass to `st` as Forward does. Throws crossword::Error as Forward.
  void ForwardHidden(model::SequenceState& st, std::span<const int32_t> tokens,
                     model::PassKind kind, bool record, float* hidden) const;
  /// Trunk layers this executor runs.
  int n_layers() const { return n_layers_; }

  Device& device() const { return device_; }
  const ExecutorOptions& options() const { return options_; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  /// Dispatches and barriers of the command list last replayed (bench, tests).
  int last_dispatch_count() const { return last_dispatches_; }
  int last_barrier_count() const { return last_barriers_; }
  /// Bench tools: passes after this record a GPU timestamp after every dispatch (lists are
  /// recorded again for the new setting; the profiled replay allocates, the others do not).
  void set_profile(bool on) { profile_ = on; }
  /// The dispatches of the last replayed list with their GPU times (empty unless profiling on a
  /// device with timestamps).
  const std::vector<ProfileSample>& last_profile() const { return last_profile_; }

 private:
  friend class DeviceState;
  struct Layer;
  struct Scratch;
  void Upload();
  // skip_ffn: SequenceInput::skip_ffn_layers (those layers record no MoE).
  void RecordPass(CommandList& cl, DeviceState& st, int64_t T, model::PassKind kind,
                  model::LogitRows rows, bool record, uint64_t skip_ffn) const;
  void RecordGdn(CommandList& cl, int il, int r, DeviceState& st, int64_t T, bool denoise,
                 bool record) const;
  void RecordAttention(CommandList& cl, int il, int a, DeviceState& st, int64_t T,
                       bool causal) const;
  void RecordMoe(CommandList& cl, int il, int64_t T) const;
  void RecordRollback(CommandList& cl, DeviceState& st) const;
  CommandList& ListFor(DeviceState& st, int64_t T, model::PassKind kind, model::LogitRows rows,
                       bool record, uint64_t skip_ffn) const;
  void RunChunk(DeviceState& st, std::span<const int32_t> tokens, model::PassKind kind,
                model::LogitRows rows, bool record, float* logits_out, uint64_t skip_ffn = 0) const;

  std::unique_ptr<Device> owned_device_;  // Open(): destroyed last
  Device& device_;
  std::shared_ptr<const model::Model> model_;
  ExecutorOptions options_;
  std::unique_ptr<MemoryPool> weights_pool_, scratch_pool_, host_pool_;
  std::vector<Layer> layers_;
  std::unique_ptr<DeviceMatrix> token_embd_, output_;
  const DeviceMatrix* output_matrix_ = nullptr;  // output_ or token_embd_ (tied)
  BufferView output_norm_;
  std::unique_ptr<Scratch> s_;
  std::vector<int> layer_slot_;  // il -> index among recurrent or attention layers
  int n_layers_ = 0;             // trunk layers on the device
  uint64_t weight_bytes_ = 0;
  mutable int last_dispatches_ = 0, last_barriers_ = 0;
  bool profile_ = false;
  mutable std::vector<ProfileSample> last_profile_;
};

}  // namespace crossword::vulkan
