// Vulkan instance / device set-up, enumeration, selection and pipelines (device.h).
#include "backends/vulkan/device.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backends/vulkan/shader_table.h"
#include "base/error.h"

namespace crossword::vulkan {
namespace {

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

uint32_t InstanceVersion() {
  uint32_t v = VK_API_VERSION_1_0;
  if (vkEnumerateInstanceVersion(&v) != VK_SUCCESS) return VK_API_VERSION_1_0;
  return v;
}

VkInstance CreateInstance(bool validation, const VkDebugUtilsMessengerCreateInfoEXT* messenger,
                          VkResult* result) {
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "crossword";
  app.pEngineName = "crossword";
  app.apiVersion = VK_API_VERSION_1_3;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  const char* layers[] = {kValidationLayer};
  const char* extensions[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
  VkValidationFeatureEnableEXT enables[] = {
      VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  VkValidationFeaturesEXT features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
  features.enabledValidationFeatureCount = 1;
  features.pEnabledValidationFeatures = enables;
  if (validation) {
    ci.enabledLayerCount = 1;
    ci.ppEnabledLayerNames = layers;
    ci.enabledExtensionCount = 1;
    ci.ppEnabledExtensionNames = extensions;
    features.pNext = messenger;
    ci.pNext = &features;
  }
  VkInstance instance = VK_NULL_HANDLE;
  *result = vkCreateInstance(&ci, nullptr, &instance);
  return *result == VK_SUCCESS ? instance : VK_NULL_HANDLE;
}

bool HasLayer(const char* name) {
  uint32_t n = 0;
  if (vkEnumerateInstanceLayerProperties(&n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkLayerProperties> layers(n);
  vkEnumerateInstanceLayerProperties(&n, layers.data());
  for (const auto& l : layers) {
    if (std::strcmp(l.layerName, name) == 0) return true;
  }
  return false;
}

int ComputeQueueFamily(VkPhysicalDevice pd, bool* timestamps) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
  std::vector<VkQueueFamilyProperties> families(n);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, families.data());
  int best = -1;
  for (uint32_t i = 0; i < n; ++i) {
    if (!(families[i].queueFlags & VK_QUEUE_COMPUTE_BIT)) continue;
    // Prefer the family with graphics too: on discrete GPUs it is the fastest-to-schedule one and
    // always supports timestamps; async compute families are fine as a fallback.
    if (best < 0 || (families[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) best = static_cast<int>(i);
  }
  if (best >= 0 && timestamps) *timestamps = families[best].timestampValidBits > 0;
  return best;
}

DeviceInfo QueryDevice(VkPhysicalDevice pd, int index) {
  DeviceInfo d;
  d.index = index;
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(pd, &props);
  d.name = props.deviceName;
  d.api_version = props.apiVersion;
  d.vendor_id = props.vendorID;
  d.device_id = props.deviceID;
  switch (props.deviceType) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      d.type = DeviceType::kDiscrete;
      break;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      d.type = DeviceType::kIntegrated;
      break;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      d.type = DeviceType::kVirtual;
      break;
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      d.type = DeviceType::kCpu;
      break;
    default:
      d.type = DeviceType::kOther;
  }
  const VkPhysicalDeviceLimits& lim = props.limits;
  d.max_shared_bytes = lim.maxComputeSharedMemorySize;
  d.max_storage_range = lim.maxStorageBufferRange;
  d.min_storage_align = lim.minStorageBufferOffsetAlignment;
  d.max_push_bytes = lim.maxPushConstantsSize;
  d.max_storage_buffers = lim.maxPerStageDescriptorStorageBuffers;
  for (int i = 0; i < 3; ++i) d.max_group_count[i] = lim.maxComputeWorkGroupCount[i];
  d.timestamp_period_ns = lim.timestampPeriod;

  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  for (uint32_t h = 0; h < mem.memoryHeapCount; ++h) {
    if (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) {
      d.device_local_bytes = std::max<uint64_t>(d.device_local_bytes, mem.memoryHeaps[h].size);
    }
  }
  bool ts = false;
  const int family = ComputeQueueFamily(pd, &ts);
  d.timestamps = ts && lim.timestampPeriod > 0.0f;

  if (props.apiVersion < VK_API_VERSION_1_3) {
    d.unusable_reason = "needs Vulkan 1.3 (the driver offers " +
                        std::to_string(VK_API_VERSION_MAJOR(props.apiVersion)) + "." +
                        std::to_string(VK_API_VERSION_MINOR(props.apiVersion)) + ")";
    return d;
  }
  VkPhysicalDeviceDriverProperties driver{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceSubgroupProperties subgroup{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceShaderIntegerDotProductProperties dot{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES};
  VkPhysicalDeviceVulkan13Properties p13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_PROPERTIES};
  VkPhysicalDeviceMaintenance3Properties m3{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  driver.pNext = &subgroup;
  subgroup.pNext = &dot;
  dot.pNext = &p13;
  p13.pNext = &m3;
  VkPhysicalDeviceProperties2 props2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  props2.pNext = &driver;
  vkGetPhysicalDeviceProperties2(pd, &props2);
  d.driver_name = driver.driverName;
  d.driver_info = driver.driverInfo;
  d.subgroup_size = subgroup.subgroupSize;
  const VkSubgroupFeatureFlags need = VK_SUBGROUP_FEATURE_BASIC_BIT |
                                      VK_SUBGROUP_FEATURE_ARITHMETIC_BIT |
                                      VK_SUBGROUP_FEATURE_SHUFFLE_BIT;
  d.subgroup_arithmetic = (subgroup.supportedOperations & need) == need &&
                          (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT);
  d.int8_dot_accelerated = dot.integerDotProduct4x8BitPackedSignedAccelerated;
  d.max_allocation_bytes = m3.maxMemoryAllocationSize;

  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceVulkan13Features f13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
  f11.pNext = &f12;
  f12.pNext = &f13;
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  f2.pNext = &f11;
  vkGetPhysicalDeviceFeatures2(pd, &f2);
  d.int8_dot = f13.shaderIntegerDotProduct;
  d.fp16 = f12.shaderFloat16;
  d.storage16 = f11.storageBuffer16BitAccess && f2.features.shaderInt16;
  d.subgroup_size_control = f13.subgroupSizeControl && f13.computeFullSubgroups &&
                            (p13.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT);

  if (family < 0) {
    d.unusable_reason = "no compute queue";
  } else if (!d.storage16) {
    d.unusable_reason = "no 16-bit storage buffer access / shaderInt16";
  } else if (d.max_push_bytes < Device::kPushBytes) {
    d.unusable_reason = "fewer than 128 bytes of push constants";
  } else if (d.max_storage_buffers < Device::kMaxBindings) {
    d.unusable_reason = "fewer than 12 storage buffers per stage";
  } else if (d.max_shared_bytes < 16384) {
    d.unusable_reason = "less than 16 KiB of shared memory";
  } else {
    d.usable = true;
  }
  return d;
}

std::vector<DeviceInfo> QueryAll(VkInstance instance, std::vector<VkPhysicalDevice>* handles) {
  uint32_t n = 0;
  if (vkEnumeratePhysicalDevices(instance, &n, nullptr) != VK_SUCCESS) return {};
  std::vector<VkPhysicalDevice> pds(n);
  vkEnumeratePhysicalDevices(instance, &n, pds.data());
  std::vector<DeviceInfo> out;
  for (uint32_t i = 0; i < n; ++i) out.push_back(QueryDevice(pds[i], static_cast<int>(i)));
  if (handles) *handles = pds;
  return out;
}

std::string HumanBytes(uint64_t b) {
  if (b >= (uint64_t{1} << 30)) return fmt::format("{:.1f} GiB", b / 1073741824.0);
  return fmt::format("{} MiB", b >> 20);
}

VKAPI_ATTR VkBool32 VKAPI_CALL OnDebugMessage(VkDebugUtilsMessageSeverityFlagBitsEXT,
                                              VkDebugUtilsMessageTypeFlagsEXT,
                                              const VkDebugUtilsMessengerCallbackDataEXT* data,
                                              void* user) {
  auto* state = static_cast<std::function<void(std::string_view)>*>(user);
  (*state)(data && data->pMessage ? data->pMessage : "(no message)");
  return VK_FALSE;
}

}  // namespace

std::string_view VkResultName(VkResult r) {
  switch (r) {
    case VK_SUCCESS:
      return "VK_SUCCESS";
    case VK_NOT_READY:
      return "VK_NOT_READY";
    case VK_TIMEOUT:
      return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_LAYER_NOT_PRESENT:
      return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
      return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER (no Vulkan driver installed?)";
    case VK_ERROR_TOO_MANY_OBJECTS:
      return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_OUT_OF_POOL_MEMORY:
      return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default:
      return "VkResult error";
  }
}

void CheckVk(VkResult r, std::string_view what) {
  if (r != VK_SUCCESS)
    Fail("vulkan: {} failed: {} ({})", what, VkResultName(r), static_cast<int>(r));
}

std::string_view DeviceTypeName(DeviceType type) {
  switch (type) {
    case DeviceType::kDiscrete:
      return "discrete GPU";
    case DeviceType::kIntegrated:
      return "integrated GPU";
    case DeviceType::kVirtual:
      return "virtual GPU";
    case DeviceType::kCpu:
      return "CPU";
    default:
      return "other";
  }
}

std::string DescribeDevice(const DeviceInfo& d) {
  std::string s = fmt::format(
      "{}: {} ({}), driver {} {}, Vulkan {}.{}, {} device-local, subgroup {}{}, shared memory "
      "{} KiB, max binding {}, int8 dot {}, fp16 {}",
      d.index, d.name, DeviceTypeName(d.type), d.driver_name, d.driver_info,
      VK_API_VERSION_MAJOR(d.api_version), VK_API_VERSION_MINOR(d.api_version),
      HumanBytes(d.device_local_bytes), d.subgroup_size,
      d.subgroup_arithmetic ? "" : " (no arithmetic)", d.max_shared_bytes / 1024,
      HumanBytes(d.max_storage_range),
      d.int8_dot ? (d.int8_dot_accelerated ? "yes (accelerated)" : "yes (not accelerated)") : "no",
      d.fp16 ? "yes" : "no");
  if (!d.usable) s += " [unusable: " + d.unusable_reason + "]";
  return s;
}

std::vector<DeviceInfo> ListDevices(std::string* why) {
  if (InstanceVersion() < VK_API_VERSION_1_3) {
    if (why) *why = "the Vulkan loader is older than 1.3 (or missing)";
    return {};
  }
  VkResult r;
  VkInstance instance = CreateInstance(false, nullptr, &r);
  if (!instance) {
    if (why) *why = fmt::format("vkCreateInstance failed: {}", VkResultName(r));
    return {};
  }
  std::vector<DeviceInfo> out = QueryAll(instance, nullptr);
  vkDestroyInstance(instance, nullptr);
  if (out.empty() && why) *why = "the Vulkan loader reports no physical device";
  return out;
}

int SelectDevice(std::span<const DeviceInfo> devices, int requested, bool allow_cpu,
                 std::string* why) {
  auto fail = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return -1;
  };
  if (devices.empty()) return fail("no Vulkan device");
  if (requested >= 0) {
    for (const DeviceInfo& d : devices) {
      if (d.index != requested) continue;
      if (!d.usable)
        return fail(
            fmt::format("device {} ({}) is unusable: {}", d.index, d.name, d.unusable_reason));
      return d.index;
    }
    return fail(fmt::format("no Vulkan device {} (there are {})", requested, devices.size()));
  }
  // Rank: discrete > integrated > virtual > other > CPU; within a rank, most device memory.
  auto rank = [](DeviceType t) {
    switch (t) {
      case DeviceType::kDiscrete:
        return 0;
      case DeviceType::kIntegrated:
        return 1;
      case DeviceType::kVirtual:
        return 2;
      case DeviceType::kOther:
        return 3;
      default:
        return 4;
    }
  };
  const DeviceInfo* best = nullptr;
  for (const DeviceInfo& d : devices) {
    if (!d.usable || (d.type == DeviceType::kCpu && !allow_cpu)) continue;
    if (!best || rank(d.type) < rank(best->type) ||
        (rank(d.type) == rank(best->type) && d.device_local_bytes > best->device_local_bytes)) {
      best = &d;
    }
  }
  if (!best) {
    std::string list;
    for (const DeviceInfo& d : devices) {
      list += fmt::format("{}{} ({}{})", list.empty() ? "" : ", ", d.name, DeviceTypeName(d.type),
                          d.usable ? "" : ": " + d.unusable_reason);
    }
    return fail("no usable Vulkan GPU among: " + list);
  }
  return best->index;
}

std::unique_ptr<Device> Device::Open(const DeviceOptions& options) {
  std::unique_ptr<Device> d(new Device());
  d->Init(options);
  return d;
}

void Device::Init(const DeviceOptions& options) {
  logger_ = options.logger;
  if (InstanceVersion() < VK_API_VERSION_1_3) {
    Fail("vulkan: the Vulkan loader is missing or older than 1.3 (install libvulkan1)");
  }
  VkDebugUtilsMessengerCreateInfoEXT mci{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  if (options.validation) {
    if (!HasLayer(kValidationLayer)) {
      Fail("vulkan: validation requested but {} is not installed (Debian: vulkan-validationlayers)",
           kValidationLayer);
    }
    validation_ = std::make_unique<ValidationState>();
    ValidationState* vs = validation_.get();
    const Logger log = logger_;
    auto sink = options.on_validation_message;
    vs->sink = [vs, log, sink](std::string_view msg) {
      std::lock_guard<std::mutex> lock(vs->mu);
      ++vs->count;
      vs->messages.emplace_back(msg);
      if (sink) {
        sink(msg);
      } else {
        log.Err("vulkan validation: {}", msg);
      }
    };
    mci.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    mci.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                      VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                      VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    mci.pfnUserCallback = OnDebugMessage;
    mci.pUserData = &vs->sink;
  }
  VkResult r;
  instance_ = CreateInstance(options.validation, options.validation ? &mci : nullptr, &r);
  if (!instance_) Fail("vulkan: vkCreateInstance failed: {}", VkResultName(r));
  if (options.validation) {
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"));
    if (create)
      CheckVk(create(instance_, &mci, nullptr, &messenger_), "vkCreateDebugUtilsMessenger");
  }
  std::vector<VkPhysicalDevice> handles;
  const std::vector<DeviceInfo> all = QueryAll(instance_, &handles);
  std::string why;
  const int index = SelectDevice(all, options.index, options.allow_cpu, &why);
  if (index < 0) Fail("vulkan: {}", why);
  info_ = all[index];
  physical_ = handles[index];
  for (const DeviceInfo& other : all) {
    if (other.index != index && other.usable && other.type == DeviceType::kIntegrated &&
        info_.type == DeviceType::kDiscrete) {
      logger_.Info("vulkan: not using integrated GPU {} ({}): the discrete GPU is faster",
                   other.index, other.name);
    }
  }
  logger_.Info("vulkan: using device {}", DescribeDevice(info_));
  if (info_.type != DeviceType::kDiscrete) {
    logger_.Warn("vulkan: device {} is a {}, not a discrete GPU", info_.name,
                 DeviceTypeName(info_.type));
  }

  queue_family_ = static_cast<uint32_t>(ComputeQueueFamily(physical_, nullptr));
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = queue_family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceVulkan13Features f13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
  f11.pNext = &f12;
  f12.pNext = &f13;
  f11.storageBuffer16BitAccess = VK_TRUE;
  f12.shaderFloat16 = info_.fp16;
  f13.shaderIntegerDotProduct = info_.int8_dot;
  f13.subgroupSizeControl = info_.subgroup_size_control;
  f13.computeFullSubgroups = info_.subgroup_size_control;
  f13.maintenance4 = VK_TRUE;  // required by Vulkan 1.3; glslc emits LocalSizeId for it
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  f2.pNext = &f11;
  f2.features.shaderInt16 = VK_TRUE;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &f2;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  CheckVk(vkCreateDevice(physical_, &dci, nullptr, &device_), "vkCreateDevice");
  vkGetDeviceQueue(device_, queue_family_, 0, &queue_);

  max_binding_bytes_ = info_.max_storage_range;
  stage_device_memory_ = options.stage_device_memory;
  if (options.max_binding_bytes > 0) {
    max_binding_bytes_ = std::min<uint64_t>(max_binding_bytes_, options.max_binding_bytes);
  }
  alignment_ = std::max<uint64_t>(256, info_.min_storage_align);
  // The subgroup path needs arithmetic + shuffles, subgroups of at least 4 lanes and workgroups
  // made of whole subgroups (guaranteed with computeFullSubgroups, or by devices whose subgroup
  // size is fixed, which all report min == max).
  subgroup_ok_ =
      info_.subgroup_arithmetic && info_.subgroup_size >= 4 && info_.subgroup_size <= 128;

  VkDescriptorSetLayoutBinding bindings[kMaxBindings];
  for (uint32_t i = 0; i < kMaxBindings; ++i) {
    bindings[i] = {};
    bindings[i].binding = i;
    bindings[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    bindings[i].descriptorCount = 1;
    bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo lci{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  lci.bindingCount = kMaxBindings;
  lci.pBindings = bindings;
  CheckVk(vkCreateDescriptorSetLayout(device_, &lci, nullptr, &set_layout_),
          "vkCreateDescriptorSetLayout");
  VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
  VkPipelineLayoutCreateInfo plci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  plci.setLayoutCount = 1;
  plci.pSetLayouts = &set_layout_;
  plci.pushConstantRangeCount = 1;
  plci.pPushConstantRanges = &push;
  CheckVk(vkCreatePipelineLayout(device_, &plci, nullptr, &pipeline_layout_),
          "vkCreatePipelineLayout");
  VkPipelineCacheCreateInfo pcci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  CheckVk(vkCreatePipelineCache(device_, &pcci, nullptr, &pipeline_cache_),
          "vkCreatePipelineCache");
  VkCommandPoolCreateInfo cpci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  cpci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  cpci.queueFamilyIndex = queue_family_;
  CheckVk(vkCreateCommandPool(device_, &cpci, nullptr, &command_pool_), "vkCreateCommandPool");
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  CheckVk(vkCreateFence(device_, &fci, nullptr, &fence_), "vkCreateFence");
}

Device::~Device() {
  if (device_) {
    vkDeviceWaitIdle(device_);
    for (auto& [name, p] : pipelines_) vkDestroyPipeline(device_, p.pipeline, nullptr);
    for (auto& [name, m] : modules_) vkDestroyShaderModule(device_, m, nullptr);
    if (fence_) vkDestroyFence(device_, fence_, nullptr);
    if (command_pool_) vkDestroyCommandPool(device_, command_pool_, nullptr);
    if (pipeline_cache_) vkDestroyPipelineCache(device_, pipeline_cache_, nullptr);
    if (pipeline_layout_) vkDestroyPipelineLayout(device_, pipeline_layout_, nullptr);
    if (set_layout_) vkDestroyDescriptorSetLayout(device_, set_layout_, nullptr);
    vkDestroyDevice(device_, nullptr);
  }
  if (messenger_) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy) destroy(instance_, messenger_, nullptr);
  }
  if (instance_) vkDestroyInstance(instance_, nullptr);
}

Reduction Device::ResolveReduction(Reduction r) const {
  if (r == Reduction::kAuto) return subgroup_ok_ ? Reduction::kSubgroup : Reduction::kShared;
  if (r == Reduction::kSubgroup && !subgroup_ok_) {
    Fail(
        "vulkan: the subgroup reduction path was forced but device {} lacks subgroup "
        "arithmetic/shuffle in compute shaders",
        info_.name);
  }
  return r;
}

size_t Device::validation_message_count() const {
  if (!validation_) return 0;
  std::lock_guard<std::mutex> lock(validation_->mu);
  return validation_->count;
}

std::vector<std::string> Device::TakeValidationMessages() {
  if (!validation_) return {};
  std::lock_guard<std::mutex> lock(validation_->mu);
  std::vector<std::string> out;
  out.swap(validation_->messages);
  return out;
}

const Pipeline& Device::GetPipeline(std::string_view name, std::span<const uint32_t> spec) {
  std::string key(name);
  for (uint32_t v : spec) key += ":" + std::to_string(v);
  if (auto it = pipelines_.find(key); it != pipelines_.end()) return it->second;

  auto mit = modules_.find(name);
  if (mit == modules_.end()) {
    std::span<const uint32_t> code = FindShader(name);
    if (code.empty()) Fail("vulkan: no embedded shader named '{}'", name);
    VkShaderModuleCreateInfo smci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    smci.codeSize = code.size() * 4;
    smci.pCode = code.data();
    VkShaderModule module;
    CheckVk(vkCreateShaderModule(device_, &smci, nullptr, &module), "vkCreateShaderModule");
    mit = modules_.emplace(std::string(name), module).first;
  }
  std::vector<VkSpecializationMapEntry> entries(spec.size());
  for (size_t i = 0; i < spec.size(); ++i) {
    entries[i] = {static_cast<uint32_t>(i), static_cast<uint32_t>(4 * i), 4};
  }
  VkSpecializationInfo si{};
  si.mapEntryCount = static_cast<uint32_t>(entries.size());
  si.pMapEntries = entries.data();
  si.dataSize = spec.size() * 4;
  si.pData = spec.data();
  VkComputePipelineCreateInfo cpci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  cpci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  cpci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cpci.stage.module = mit->second;
  cpci.stage.pName = "main";
  cpci.stage.pSpecializationInfo = &si;
  cpci.layout = pipeline_layout_;
  // Subgroup variants: ask for whole subgroups of the size the shader was specialized for.
  VkPipelineShaderStageRequiredSubgroupSizeCreateInfo rss{
      VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO};
  const bool subgroup_variant = name.size() > 3 && name.substr(name.size() - 3) == "_sg";
  const uint32_t wg = spec.empty() ? 1 : spec[0];
  if (subgroup_variant && info_.subgroup_size_control && wg % info_.subgroup_size == 0) {
    rss.requiredSubgroupSize = info_.subgroup_size;
    cpci.stage.pNext = &rss;
    cpci.stage.flags = VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
  }
  Pipeline p;
  p.name = std::string(name);
  p.workgroup_size = wg;
  const auto t0 = std::chrono::steady_clock::now();
  CheckVk(vkCreateComputePipelines(device_, pipeline_cache_, 1, &cpci, nullptr, &p.pipeline),
          "vkCreateComputePipelines(" + key + ")");
  logger_.Debug(
      "vulkan: pipeline {} built in {:.1f} ms", key,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return pipelines_.emplace(std::move(key), std::move(p)).first->second;
}

VkCommandBuffer Device::AllocateCommandBuffer() {
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = command_pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cb;
  CheckVk(vkAllocateCommandBuffers(device_, &ai, &cb), "vkAllocateCommandBuffers");
  return cb;
}

void Device::FreeCommandBuffer(VkCommandBuffer cb) {
  if (cb) vkFreeCommandBuffers(device_, command_pool_, 1, &cb);
}

void Device::Submit(VkCommandBuffer cb) {
  Check(!in_flight_, "vulkan: Submit while another submission is in flight (call Wait first)");
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  CheckVk(vkQueueSubmit(queue_, 1, &si, fence_), "vkQueueSubmit");
  in_flight_ = true;
}

void Device::Wait() {
  if (!in_flight_) return;
  in_flight_ = false;
  CheckVk(vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  CheckVk(vkResetFences(device_, 1, &fence_), "vkResetFences");
}

void Device::SubmitAndWait(VkCommandBuffer cb) {
  Submit(cb);
  Wait();
}

void Device::RunOnce(const std::function<void(VkCommandBuffer)>& fn) {
  VkCommandBuffer cb = AllocateCommandBuffer();
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  try {
    CheckVk(vkBeginCommandBuffer(cb, &bi), "vkBeginCommandBuffer");
    fn(cb);
    CheckVk(vkEndCommandBuffer(cb), "vkEndCommandBuffer");
    SubmitAndWait(cb);
  } catch (...) {
    FreeCommandBuffer(cb);
    throw;
  }
  FreeCommandBuffer(cb);
}

}  // namespace crossword::vulkan
