// The Vulkan device of the GPU backend: instance creation (optionally with the Khronos
// validation layer and synchronization validation), device enumeration and selection, the one
// descriptor-set layout / pipeline layout every shader uses, pipelines built lazily from the
// embedded SPIR-V, and submission of recorded command lists. docs/gpu.md describes the design.
//
// Not thread-safe: one thread records and submits (the executor's).
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/log.h"

namespace crossword::vulkan {

enum class DeviceType { kDiscrete, kIntegrated, kVirtual, kCpu, kOther };
std::string_view DeviceTypeName(DeviceType type);

/// What crossword needs to know about one physical device (from vkGetPhysicalDevice*).
struct DeviceInfo {
  int index = -1;  ///< position in vkEnumeratePhysicalDevices order
  std::string name;
  DeviceType type = DeviceType::kOther;
  std::string driver_name;  ///< VkPhysicalDeviceDriverProperties::driverName
  std::string driver_info;  ///< driverInfo (e.g. "Mesa 22.3.6 (LLVM 15.0.6)")
  uint32_t api_version = 0;
  uint32_t vendor_id = 0;
  uint32_t device_id = 0;
  uint64_t device_local_bytes = 0;  ///< largest DEVICE_LOCAL heap
  uint32_t subgroup_size = 0;
  bool subgroup_arithmetic = false;  ///< arithmetic + shuffle ops in compute shaders
  bool subgroup_size_control = false;
  uint32_t max_shared_bytes = 0;      ///< maxComputeSharedMemorySize
  uint64_t max_storage_range = 0;     ///< maxStorageBufferRange (bytes per binding)
  uint64_t min_storage_align = 0;     ///< minStorageBufferOffsetAlignment
  uint64_t max_allocation_bytes = 0;  ///< maxMemoryAllocationSize
  uint32_t max_push_bytes = 0;        ///< maxPushConstantsSize
  uint32_t max_group_count[3] = {0, 0, 0};
  uint32_t max_storage_buffers = 0;   ///< maxPerStageDescriptorStorageBuffers
  bool int8_dot = false;              ///< shaderIntegerDotProduct (OpSDot on packed 4x8)
  bool int8_dot_accelerated = false;  ///< integerDotProduct4x8BitPackedSignedAccelerated
  bool fp16 = false;                  ///< shaderFloat16
  bool storage16 = false;             ///< storageBuffer16BitAccess + shaderInt16
  bool timestamps = false;            ///< compute queue timestamps
  float timestamp_period_ns = 0.0f;
  /// Whether crossword can run on it (Vulkan 1.3, 16-bit storage, compute queue); else why not.
  bool usable = false;
  std::string unusable_reason;
};

/// One line about a device: name, type, driver, memory, subgroup size, shared memory, int8 dot
/// and fp16 support (the --list-devices row and the log line at start-up).
std::string DescribeDevice(const DeviceInfo& info);

/// Every physical device the Vulkan loader reports. Never throws: with no loader, no driver or
/// no device the list is empty and *why (if given) says which.
std::vector<DeviceInfo> ListDevices(std::string* why = nullptr);

/// Picks a device for `requested` (>= 0: that index, which must be usable; -1: automatic).
/// Automatic: a usable discrete GPU (the one with most device-local memory) if there is one,
/// never an integrated GPU while a discrete one exists; else an integrated or virtual GPU;
/// CPU implementations (lavapipe) only when allow_cpu. Returns -1 when none fits and sets *why.
int SelectDevice(std::span<const DeviceInfo> devices, int requested, bool allow_cpu,
                 std::string* why);

/// How shaders reduce across a workgroup. kSubgroup uses subgroup arithmetic / shuffles (and
/// shared memory between subgroups); kShared uses shared memory only (devices with small or
/// missing subgroup support; tests force both).
enum class Reduction { kAuto, kSubgroup, kShared };

struct DeviceOptions {
  int index = -1;          ///< -1: automatic (SelectDevice)
  bool allow_cpu = false;  ///< accept CPU implementations such as lavapipe when automatic
  /// Enables VK_LAYER_KHRONOS_validation with synchronization validation; every warning or
  /// error it reports goes to on_validation_message (default: logged as an error) and is counted.
  bool validation = false;
  std::function<void(std::string_view)> on_validation_message;
  /// Bytes one binding may span (0 = the device's maxStorageBufferRange). Tests lower it to
  /// exercise the splitting of large tensors on small shapes.
  uint64_t max_binding_bytes = 0;
  /// Tests: device memory is never mapped, even where it is host-visible (lavapipe, integrated
  /// GPUs), so uploads and read-backs take the staging path a discrete GPU takes.
  bool stage_device_memory = false;
  Logger logger;
};

/// A compute pipeline with the shared layout (see Device::Pipeline).
struct Pipeline {
  VkPipeline pipeline = VK_NULL_HANDLE;
  std::string name;
  uint32_t workgroup_size = 0;
};

/// The logical device: owns the instance, the queue, the shared layouts, a pipeline cache and
/// a few helpers (a fence, a transient command pool). Movable only through unique_ptr.
class Device {
 public:
  /// Number of storage-buffer bindings in the one descriptor-set layout (binding 0 is the
  /// per-step parameter buffer, 1..kMaxBindings-1 belong to the op).
  static constexpr uint32_t kMaxBindings = 12;
  /// Push-constant bytes every pipeline layout declares (the Vulkan minimum guarantee).
  static constexpr uint32_t kPushBytes = 128;

  /// Opens a device. Throws crossword::Error naming the reason (no loader, no device, the
  /// requested index unusable, validation layer missing when requested, ...).
  static std::unique_ptr<Device> Open(const DeviceOptions& options);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }
  const Logger& logger() const { return logger_; }
  VkDevice device() const { return device_; }
  VkPhysicalDevice physical_device() const { return physical_; }
  VkQueue queue() const { return queue_; }
  uint32_t queue_family() const { return queue_family_; }
  VkDescriptorSetLayout set_layout() const { return set_layout_; }
  VkPipelineLayout pipeline_layout() const { return pipeline_layout_; }
  /// Bytes one descriptor binding may span (options.max_binding_bytes or the device limit).
  uint64_t max_binding_bytes() const { return max_binding_bytes_; }
  /// DeviceOptions::stage_device_memory.
  bool stages_device_memory() const { return stage_device_memory_; }
  /// Alignment of every sub-allocation and descriptor offset (>= minStorageBufferOffsetAlignment).
  uint64_t alignment() const { return alignment_; }
  /// The subgroup path is available (arithmetic + shuffle, size >= 4, size control or fixed).
  bool subgroup_ok() const { return subgroup_ok_; }
  Reduction ResolveReduction(Reduction r) const;

  /// Whether the validation layer (with synchronization validation) is active.
  bool validation_enabled() const { return validation_ != nullptr; }
  /// Count and text of the validation messages seen so far (validation mode only).
  size_t validation_message_count() const;
  std::vector<std::string> TakeValidationMessages();

  /// The pipeline of embedded shader `name` with specialization constants `spec` (constant_id
  /// i gets spec[i]; spec[0] is the workgroup size). Built on first use and cached. Throws
  /// crossword::Error for an unknown shader name.
  const Pipeline& GetPipeline(std::string_view name, std::span<const uint32_t> spec);
  size_t pipeline_count() const { return pipelines_.size(); }

  /// A command buffer from the device's pool (primary, resettable). Free with FreeCommandBuffer.
  VkCommandBuffer AllocateCommandBuffer();
  void FreeCommandBuffer(VkCommandBuffer cb);
  /// Submits `cb` and waits for it (fence). Throws crossword::Error on device loss.
  void SubmitAndWait(VkCommandBuffer cb);
  /// Submits `cb` signalling the device's fence; Wait() blocks until it completes. One submission
  /// in flight at a time.
  void Submit(VkCommandBuffer cb);
  void Wait();

  /// Records and runs `fn` on a one-time command buffer (uploads, tests).
  void RunOnce(const std::function<void(VkCommandBuffer)>& fn);

 private:
  Device() = default;
  void Init(const DeviceOptions& options);

  struct ValidationState {
    std::mutex mu;
    std::vector<std::string> messages;
    size_t count = 0;
    std::function<void(std::string_view)> sink;
  };

  DeviceInfo info_;
  Logger logger_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout pipeline_layout_ = VK_NULL_HANDLE;
  VkPipelineCache pipeline_cache_ = VK_NULL_HANDLE;
  VkCommandPool command_pool_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  bool in_flight_ = false;
  uint64_t max_binding_bytes_ = 0;
  bool stage_device_memory_ = false;
  uint64_t alignment_ = 256;
  bool subgroup_ok_ = false;
  std::unique_ptr<ValidationState> validation_;
  std::map<std::string, Pipeline, std::less<>> pipelines_;
  std::map<std::string, VkShaderModule, std::less<>> modules_;
};

/// Throws crossword::Error "<what>: <VkResult name>" when r is not VK_SUCCESS.
void CheckVk(VkResult r, std::string_view what);
std::string_view VkResultName(VkResult r);

}  // namespace crossword::vulkan
