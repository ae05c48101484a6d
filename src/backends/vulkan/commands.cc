// Command recording with hazard-tracked barriers (commands.h).
#include "backends/vulkan/commands.h"

#include <algorithm>

#include "base/error.h"

namespace crossword::vulkan {
namespace {

constexpr uint32_t kSetsPerPool = 256;
constexpr uint64_t kDummyBytes = uint64_t{1} << 20;
constexpr uint64_t kDummySlot = 256;

void FullBarrier(VkCommandBuffer cb, VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = dst_access;
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       dst_stage, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

constexpr VkAccessFlags kAllShaderTransfer =
    VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
    VK_ACCESS_TRANSFER_WRITE_BIT;
constexpr VkPipelineStageFlags kComputeTransfer =
    VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;

}  // namespace

CommandList::CommandList(Device& device) : device_(device) {
  cb_ = device_.AllocateCommandBuffer();
}

CommandList::~CommandList() {
  VkDevice dev = device_.device();
  vkDeviceWaitIdle(dev);
  device_.FreeCommandBuffer(cb_);
  for (VkDescriptorPool p : pools_) vkDestroyDescriptorPool(dev, p, nullptr);
  if (queries_ != VK_NULL_HANDLE) vkDestroyQueryPool(dev, queries_, nullptr);
}

bool CommandList::UsesInt8(GgmlType type) const {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      break;
    default:
      return false;
  }
  switch (config_.mat_path) {
    case MatPath::kFloat:
      return false;
    case MatPath::kInt8:
      Check(device_.info().int8_dot,
            "vulkan: the int8 mat-vec path was forced but {} lacks shaderIntegerDotProduct",
            device_.info().name);
      return true;
    default:
      return device_.info().int8_dot;
  }
}

uint32_t CommandList::WorkgroupSize(uint32_t preferred) const {
  if (reduction_ == Reduction::kSubgroup) {
    return std::max(preferred, device_.info().subgroup_size);
  }
  return preferred;
}

void CommandList::Begin(BufferView params, const OpConfig& config) {
  Check(!recording_, "vulkan: CommandList::Begin while recording");
  Check(!params.valid() || params.offset % device_.info().min_storage_align == 0,
        "vulkan: the parameter buffer must start at a {}-byte aligned offset",
        device_.info().min_storage_align);
  params_ = params;
  config_ = config;
  reduction_ = device_.ResolveReduction(config.reduction);
  for (VkDescriptorPool p : pools_) {
    CheckVk(vkResetDescriptorPool(device_.device(), p, 0), "vkResetDescriptorPool");
  }
  pool_index_ = 0;
  sets_in_pool_ = 0;
  CheckVk(vkResetCommandBuffer(cb_, 0), "vkResetCommandBuffer");
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  CheckVk(vkBeginCommandBuffer(cb_, &bi), "vkBeginCommandBuffer");
  recording_ = true;
  recorded_ = false;
  pending_reads_.clear();
  pending_writes_.clear();
  dispatches_ = 0;
  barriers_ = 0;
  dummy_next_ = 0;
  // Earlier submissions (uploads, the previous replay) wrote what this list reads.
  FullBarrier(cb_, kComputeTransfer, kAllShaderTransfer);
  names_.clear();
  if (config_.profile && device_.info().timestamps) {
    if (queries_ == VK_NULL_HANDLE) {
      // Enough for the largest pass recorded (about 1,000 dispatches at 40 layers); dispatches
      // past the capacity are not timed.
      query_capacity_ = 8192;
      VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
      qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
      qi.queryCount = query_capacity_;
      CheckVk(vkCreateQueryPool(device_.device(), &qi, nullptr, &queries_), "vkCreateQueryPool");
    }
    vkCmdResetQueryPool(cb_, queries_, 0, query_capacity_);
    vkCmdWriteTimestamp(cb_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, 0);
  }
}

std::vector<ProfileSample> CommandList::Profile() const {
  std::vector<ProfileSample> out;
  if (queries_ == VK_NULL_HANDLE || names_.empty()) return out;
  const uint32_t n = static_cast<uint32_t>(names_.size()) + 1;
  std::vector<uint64_t> ts(n);
  CheckVk(
      vkGetQueryPoolResults(device_.device(), queries_, 0, n, n * sizeof(uint64_t), ts.data(),
                            sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
      "vkGetQueryPoolResults");
  const double ns = device_.info().timestamp_period_ns;
  out.reserve(names_.size());
  for (size_t i = 0; i < names_.size(); ++i) {
    // A timestamp is written once every earlier command has finished (the spec), so they grow;
    // the guard only keeps a driver that disagrees from wrapping around.
    const uint64_t d = ts[i + 1] >= ts[i] ? ts[i + 1] - ts[i] : 0;
    out.push_back({names_[i], static_cast<double>(d) * ns * 1e-3});
  }
  return out;
}

void CommandList::End() {
  Check(recording_, "vulkan: CommandList::End without Begin");
  FullBarrier(cb_, VK_PIPELINE_STAGE_HOST_BIT | kComputeTransfer,
              VK_ACCESS_HOST_READ_BIT | kAllShaderTransfer);
  CheckVk(vkEndCommandBuffer(cb_), "vkEndCommandBuffer");
  recording_ = false;
  recorded_ = true;
}

void CommandList::Run() {
  Submit();
  Wait();
}

void CommandList::Submit() {
  Check(recorded_, "vulkan: CommandList::Submit before End");
  device_.Submit(cb_);
}

void CommandList::Wait() { device_.Wait(); }

void CommandList::Barrier() {
  Check(recording_, "vulkan: Barrier outside recording");
  FullBarrier(cb_, kComputeTransfer, kAllShaderTransfer);
  ++barriers_;
  pending_reads_.clear();
  pending_writes_.clear();
}

bool CommandList::Overlaps(const std::vector<Range>& set, const Range& r) {
  for (const Range& s : set) {
    if (s.buffer == r.buffer && s.lo < r.hi && r.lo < s.hi) return true;
  }
  return false;
}

void CommandList::Track(std::span<const Range> reads, std::span<const Range> writes) {
  bool hazard = false;
  for (const Range& r : reads) hazard = hazard || Overlaps(pending_writes_, r);
  for (const Range& w : writes) {
    hazard = hazard || Overlaps(pending_writes_, w) || Overlaps(pending_reads_, w);
  }
  if (hazard) Barrier();
  pending_reads_.insert(pending_reads_.end(), reads.begin(), reads.end());
  pending_writes_.insert(pending_writes_.end(), writes.begin(), writes.end());
}

VkDescriptorSet CommandList::AllocateSet() {
  if (pool_index_ < pools_.size() && sets_in_pool_ == kSetsPerPool) {
    ++pool_index_;
    sets_in_pool_ = 0;
  }
  if (pool_index_ == pools_.size()) {
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                              kSetsPerPool * Device::kMaxBindings};
    VkDescriptorPoolCreateInfo pci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    pci.maxSets = kSetsPerPool;
    pci.poolSizeCount = 1;
    pci.pPoolSizes = &size;
    VkDescriptorPool pool;
    CheckVk(vkCreateDescriptorPool(device_.device(), &pci, nullptr, &pool),
            "vkCreateDescriptorPool");
    pools_.push_back(pool);
    sets_in_pool_ = 0;
  }
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorPool = pools_[pool_index_];
  ai.descriptorSetCount = 1;
  VkDescriptorSetLayout layout = device_.set_layout();
  ai.pSetLayouts = &layout;
  VkDescriptorSet set;
  CheckVk(vkAllocateDescriptorSets(device_.device(), &ai, &set), "vkAllocateDescriptorSets");
  ++sets_in_pool_;
  return set;
}

BufferView CommandList::DummyRange() {
  if (!dummy_pool_) {
    dummy_pool_ = std::make_unique<MemoryPool>(device_, MemoryKind::kDevice, kDummyBytes);
    dummy_ = dummy_pool_->Allocate(kDummyBytes, "dummy bindings");
  }
  if (dummy_next_ + kDummySlot > dummy_.size) dummy_next_ = 0;  // reuse: tracked like any range
  BufferView v = dummy_.Sub(dummy_next_, kDummySlot);
  dummy_next_ += kDummySlot;
  return v;
}

void CommandList::Dispatch(std::string_view name, std::span<const uint32_t> spec,
                           std::span<const Binding> bindings, std::span<const uint32_t> push,
                           uint32_t gx, uint32_t gy, uint32_t gz) {
  Check(recording_, "vulkan: Dispatch({}) outside Begin/End", name);
  Check(bindings.size() + 1 <= Device::kMaxBindings, "vulkan: {}: {} bindings (max {})", name,
        bindings.size(), Device::kMaxBindings - 1);
  const size_t push_words = bindings.size() + push.size();
  Check(push_words * 4 <= Device::kPushBytes, "vulkan: {}: {} push-constant words (max {})", name,
        push_words, Device::kPushBytes / 4);
  const DeviceInfo& info = device_.info();
  Check(gx >= 1 && gy >= 1 && gz >= 1 && gx <= info.max_group_count[0] &&
            gy <= info.max_group_count[1] && gz <= info.max_group_count[2],
        "vulkan: {}: {} x {} x {} workgroups exceed the device limits", name, gx, gy, gz);
  const Pipeline& pipeline = device_.GetPipeline(name, spec);

  VkDescriptorBufferInfo infos[Device::kMaxBindings];
  uint32_t words[Device::kPushBytes / 4] = {};
  Range reads[Device::kMaxBindings], writes[Device::kMaxBindings];
  size_t n_reads = 0, n_writes = 0;
  const uint64_t align = device_.info().min_storage_align;
  BufferView params = params_.valid() ? params_ : DummyRange();
  infos[0] = {params.buffer, params.offset, params.size};
  for (size_t i = 0; i < bindings.size(); ++i) {
    const Binding& b = bindings[i];
    const bool dummy = !b.view.valid();
    const BufferView v = dummy ? DummyRange() : b.view;
    const uint64_t base = v.offset / align * align;
    const uint64_t delta = v.offset - base;
    const uint64_t range = delta + v.size;
    Check(delta % b.unit_bytes == 0,
          "vulkan: {}: binding {} starts at byte {}, not a multiple of its {}-byte unit", name,
          i + 1, v.offset, b.unit_bytes);
    Check(range <= device_.max_binding_bytes(),
          "vulkan: {}: binding {} spans {} bytes, more than one binding may ({})", name, i + 1,
          range, device_.max_binding_bytes());
    infos[i + 1] = {v.buffer, base, range};
    words[i] = static_cast<uint32_t>(delta / b.unit_bytes);
    // Track the whole descriptor range: that is what synchronization validation checks.
    const Range r{v.buffer, base, base + range};
    if (dummy || b.access != Access::kRead) writes[n_writes++] = r;
    if (!dummy && b.access != Access::kWrite) reads[n_reads++] = r;
  }
  for (size_t i = 0; i < push.size(); ++i) words[bindings.size() + i] = push[i];
  Track({reads, n_reads}, {writes, n_writes});

  VkDescriptorSet set = AllocateSet();
  VkWriteDescriptorSet w[Device::kMaxBindings];
  for (size_t i = 0; i <= bindings.size(); ++i) {
    w[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w[i].dstSet = set;
    w[i].dstBinding = static_cast<uint32_t>(i);
    w[i].descriptorCount = 1;
    w[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w[i].pBufferInfo = &infos[i];
  }
  vkUpdateDescriptorSets(device_.device(), static_cast<uint32_t>(bindings.size() + 1), w, 0,
                         nullptr);
  vkCmdBindPipeline(cb_, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.pipeline);
  vkCmdBindDescriptorSets(cb_, VK_PIPELINE_BIND_POINT_COMPUTE, device_.pipeline_layout(), 0, 1,
                          &set, 0, nullptr);
  vkCmdPushConstants(cb_, device_.pipeline_layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0,
                     Device::kPushBytes, words);
  vkCmdDispatch(cb_, gx, gy, gz);
  ++dispatches_;
  if (config_.profile && queries_ != VK_NULL_HANDLE && names_.size() + 1 < query_capacity_) {
    names_.emplace_back(name);
    vkCmdWriteTimestamp(cb_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_,
                        static_cast<uint32_t>(names_.size()));
  }
}

void CommandList::Copy(BufferView src, BufferView dst) {
  Check(recording_, "vulkan: Copy outside Begin/End");
  Check(src.size <= dst.size, "vulkan: copy of {} bytes into {}", src.size, dst.size);
  if (src.size == 0) return;
  const Range r{src.buffer, src.offset, src.offset + src.size};
  const Range w{dst.buffer, dst.offset, dst.offset + src.size};
  Track({&r, 1}, {&w, 1});
  VkBufferCopy region{src.offset, dst.offset, src.size};
  vkCmdCopyBuffer(cb_, src.buffer, dst.buffer, 1, &region);
}

void CommandList::Fill(BufferView dst, uint32_t value) {
  Check(recording_, "vulkan: Fill outside Begin/End");
  Check(dst.offset % 4 == 0 && dst.size % 4 == 0, "vulkan: Fill needs 4-byte aligned ranges");
  const Range w{dst.buffer, dst.offset, dst.offset + dst.size};
  Track({}, {&w, 1});
  vkCmdFillBuffer(cb_, dst.buffer, dst.offset, dst.size, value);
}

}  // namespace crossword::vulkan
