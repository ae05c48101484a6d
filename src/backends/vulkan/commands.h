// Command recording for the Vulkan backend. An executor records one CommandList per pass shape
// (AR step, a 32-token block, ...) once and replays it every step: per-step values (positions,
// token counts) live in a small host-visible parameter buffer that shaders read through DynInt
// slots, so nothing is re-recorded. Barriers are inserted only where a command touches a range
// that an earlier command since the last barrier wrote (read-after-write, write-after-write) or
// read (write-after-read). docs/gpu.md.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/vulkan/device.h"
#include "backends/vulkan/memory.h"
#include "core/types.h"

namespace crossword::vulkan {

/// An int32 shader input fixed at record time (slot < 0: `value`) or read at run time from
/// slot `slot` of the parameter buffer (int32 words) given to CommandList::Begin, which the
/// host writes before each replay (e.g. n_past).
struct DynInt {
  int32_t value = 0;
  int32_t slot = -1;
  static DynInt Const(int32_t v) { return {v, -1}; }
  static DynInt Slot(int32_t s) { return {0, s}; }
};

/// Which mat-vec kernels quantized weights use. kInt8: activations quantized as the CPU engine
/// does (Q8_0 blocks for Q4_0/Q8_0, Q8_K for K-quants) and integer dot products (OpSDot);
/// kFloat: weights dequantized to f32 against f32 activations. kAuto: kInt8 where the device
/// has shaderIntegerDotProduct (results then match the CPU engine up to summation order).
enum class MatPath { kAuto, kFloat, kInt8 };

struct OpConfig {
  Reduction reduction = Reduction::kAuto;
  MatPath mat_path = MatPath::kAuto;
  /// Writes a GPU timestamp after every dispatch (devices with timestamps; ignored elsewhere):
  /// CommandList::Profile() then gives each dispatch's time. Bench tools only (the timestamps
  /// cost a little and serialize nothing, so a dispatch's time is from the previous one's end).
  bool profile = false;
};

enum class Access { kRead, kWrite, kReadWrite };

/// One buffer an op binds: the view (an invalid view binds a private dummy range), how the
/// shader uses it, and the size of the unit the shader indexes it by (the sub-binding offset is
/// passed in those units).
struct Binding {
  BufferView view;
  Access access = Access::kRead;
  uint32_t unit_bytes = 4;
};

/// One dispatch's share of a profiled replay (OpConfig::profile): the shader variant and the
/// microseconds from the end of the previous command to its end (GPU timestamps).
struct ProfileSample {
  std::string name;
  double us = 0;
};

/// A recorded, replayable command buffer with its descriptor sets. Not thread-safe.
class CommandList {
 public:
  explicit CommandList(Device& device);
  ~CommandList();
  CommandList(const CommandList&) = delete;
  CommandList& operator=(const CommandList&) = delete;

  /// Starts (re-)recording. `params` is the per-step parameter buffer (int32 words; host-visible
  /// so the host can write it between replays; may be invalid when no op uses DynInt slots).
  /// Must not be called while a submission of this list is in flight.
  void Begin(BufferView params, const OpConfig& config = {});
  /// Ends recording (adds the barrier that makes results visible to the host).
  void End();
  /// Submits and waits. The list can be run any number of times after End().
  void Run();
  void Submit();
  void Wait();

  Device& device() { return device_; }
  const OpConfig& config() const { return config_; }
  /// The reduction path the ops record with (config().reduction resolved for this device).
  Reduction reduction() const { return reduction_; }
  /// Whether matrices of `type` use the int8 path in this recording (config and device).
  bool UsesInt8(GgmlType type) const;
  /// Suffix of the variant name for the recording's reduction path: "_sg" or "_sh".
  std::string_view ReductionSuffix() const {
    return reduction_ == Reduction::kSubgroup ? "_sg" : "_sh";
  }
  /// Workgroup size for shaders that reduce: `preferred`, at least the subgroup size on the
  /// subgroup path (a power of two).
  uint32_t WorkgroupSize(uint32_t preferred) const;

  /// Records one dispatch of shader `name` (spec[0] = workgroup size, spec[1] = subgroup size,
  /// further constants per shader). The push constants are: one uint per binding (the view's
  /// offset from its descriptor's aligned offset, in unit_bytes), then `push`. Inserts a
  /// barrier first when the bindings conflict with earlier commands (see the file comment).
  /// Throws crossword::Error for a binding wider than Device::max_binding_bytes(), misaligned
  /// units, too many push words, or group counts above the device limits.
  void Dispatch(std::string_view name, std::span<const uint32_t> spec,
                std::span<const Binding> bindings, std::span<const uint32_t> push, uint32_t gx,
                uint32_t gy = 1, uint32_t gz = 1);
  /// Records a buffer copy (src.size bytes) / a 32-bit fill, with the same hazard tracking.
  void Copy(BufferView src, BufferView dst);
  void Fill(BufferView dst, uint32_t value);
  /// A full barrier regardless of tracking.
  void Barrier();

  /// The dispatches of the last Run() with their times; empty unless recorded with
  /// OpConfig::profile on a device with timestamps. Call after Run() (or Wait()).
  std::vector<ProfileSample> Profile() const;

  int dispatch_count() const { return dispatches_; }
  int barrier_count() const { return barriers_; }
  VkCommandBuffer handle() const { return cb_; }

 private:
  struct Range {
    VkBuffer buffer;
    uint64_t lo, hi;
  };
  static bool Overlaps(const std::vector<Range>& set, const Range& r);
  void Track(std::span<const Range> reads, std::span<const Range> writes);
  VkDescriptorSet AllocateSet();
  BufferView DummyRange();

  Device& device_;
  VkCommandBuffer cb_ = VK_NULL_HANDLE;
  std::vector<VkDescriptorPool> pools_;
  size_t pool_index_ = 0;
  uint32_t sets_in_pool_ = 0;
  BufferView params_;
  OpConfig config_;
  Reduction reduction_ = Reduction::kShared;
  bool recording_ = false;
  bool recorded_ = false;
  std::vector<Range> pending_reads_, pending_writes_;
  int dispatches_ = 0;
  int barriers_ = 0;
  // Private dummy ranges for unused optional bindings (one per use, so they never conflict).
  // Profiling: one timestamp at Begin and one after each dispatch (names_[i] for query i + 1).
  VkQueryPool queries_ = VK_NULL_HANDLE;
  uint32_t query_capacity_ = 0;
  std::vector<std::string> names_;
  std::unique_ptr<MemoryPool> dummy_pool_;
  BufferView dummy_;
  uint64_t dummy_next_ = 0;
};

}  // namespace crossword::vulkan
