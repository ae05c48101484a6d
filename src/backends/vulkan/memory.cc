// Memory pools, uploads and weight pieces of the Vulkan backend (memory.h).
#include "backends/vulkan/memory.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace crossword::vulkan {
namespace {

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string Mib(uint64_t b) { return fmt::format("{:.1f} MiB", b / 1048576.0); }

// Picks the memory type for a pool: the required flags, then the preferred ones.
int FindMemoryType(const VkPhysicalDeviceMemoryProperties& mp, uint32_t type_bits,
                   VkMemoryPropertyFlags required, VkMemoryPropertyFlags preferred,
                   VkMemoryPropertyFlags avoid) {
  int best = -1, best_score = -1;
  for (uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
    if (!(type_bits & (1u << i))) continue;
    const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
    if ((f & required) != required) continue;
    int score = 0;
    if ((f & preferred) == preferred) score += 2;
    if (!(f & avoid)) score += 1;
    if (score > best_score) {
      best = static_cast<int>(i);
      best_score = score;
    }
  }
  return best;
}

VkBuffer CreateBuffer(VkDevice dev, uint64_t bytes) {
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = bytes;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
              VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer b;
  CheckVk(vkCreateBuffer(dev, &bci, nullptr, &b), "vkCreateBuffer");
  return b;
}

}  // namespace

BufferView BufferView::Sub(uint64_t off, uint64_t bytes) const {
  Check(off <= size && bytes <= size - off, "vulkan: sub-view [{}, {}) leaves a view of {} bytes",
        off, off + bytes, size);
  BufferView v = *this;
  v.offset = offset + off;
  v.size = bytes;
  v.host = host ? host + off : nullptr;
  return v;
}

MemoryPool::MemoryPool(Device& device, MemoryKind kind, uint64_t block_bytes)
    : device_(device), kind_(kind), block_bytes_(block_bytes) {
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(device.physical_device(), &mp);
  // The type bits of a storage buffer (the same for every size in practice).
  VkBuffer probe = CreateBuffer(device.device(), 4096);
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device.device(), probe, &req);
  vkDestroyBuffer(device.device(), probe, nullptr);
  int type;
  if (kind == MemoryKind::kDevice) {
    // Discrete GPUs: plain VRAM (host-visible VRAM is a small BAR window without ReBAR).
    // Others (integrated, lavapipe): device-local memory is host memory; map it to skip staging.
    const bool discrete = device.info().type == DeviceType::kDiscrete;
    const VkMemoryPropertyFlags host =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    type = FindMemoryType(mp, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
                          discrete ? 0 : host, discrete ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT : 0);
  } else {
    type =
        FindMemoryType(mp, req.memoryTypeBits,
                       VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                       VK_MEMORY_PROPERTY_HOST_CACHED_BIT, 0);
  }
  Check(type >= 0, "vulkan: no suitable memory type for a {} pool on {}",
        kind == MemoryKind::kDevice ? "device" : "host", device.info().name);
  memory_type_ = static_cast<uint32_t>(type);
  heap_ = mp.memoryTypes[type].heapIndex;
  const VkMemoryPropertyFlags f = mp.memoryTypes[type].propertyFlags;
  mapped_ = (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && (f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
  if (kind == MemoryKind::kDevice && device.stages_device_memory()) mapped_ = false;
}

MemoryPool::~MemoryPool() {
  VkDevice dev = device_.device();
  vkDeviceWaitIdle(dev);
  for (Block& b : blocks_) {
    vkDestroyBuffer(dev, b.buffer, nullptr);
    if (b.mapped) vkUnmapMemory(dev, b.memory);
    vkFreeMemory(dev, b.memory, nullptr);
  }
}

MemoryPool::Block& MemoryPool::NewBlock(uint64_t bytes, std::string_view what) {
  VkDevice dev = device_.device();
  Block b;
  b.size = bytes;
  b.buffer = CreateBuffer(dev, bytes);
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev, b.buffer, &req);
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = memory_type_;
  const VkResult r = vkAllocateMemory(dev, &ai, nullptr, &b.memory);
  if (r != VK_SUCCESS) {
    vkDestroyBuffer(dev, b.buffer, nullptr);
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(device_.physical_device(), &mp);
    Fail(
        "vulkan: cannot allocate {} for {} on {} ({}): {} already allocated in this pool, heap "
        "size {}; use a smaller model, a shorter context (-c) or fewer GPU layers (-ngl)",
        Mib(bytes), what, device_.info().name, VkResultName(r), Mib(reserved_),
        Mib(mp.memoryHeaps[heap_].size));
  }
  CheckVk(vkBindBufferMemory(dev, b.buffer, b.memory, 0), "vkBindBufferMemory");
  if (mapped_) {
    void* p = nullptr;
    CheckVk(vkMapMemory(dev, b.memory, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
    b.mapped = static_cast<uint8_t*>(p);
  }
  reserved_ += bytes;
  blocks_.push_back(b);
  return blocks_.back();
}

BufferView MemoryPool::Allocate(uint64_t bytes, std::string_view what) {
  Check(bytes > 0, "vulkan: zero-byte allocation for {}", what);
  const uint64_t align = device_.alignment();
  const uint64_t need = AlignUp(bytes, align);
  Block* block = nullptr;
  for (Block& b : blocks_) {
    if (b.size - b.used >= need) {
      block = &b;
      break;
    }
  }
  if (!block) block = &NewBlock(std::max(need, block_bytes_), what);
  BufferView v;
  v.buffer = block->buffer;
  v.offset = block->used;
  v.size = bytes;
  v.host = block->mapped ? block->mapped + block->used : nullptr;
  block->used += need;
  allocated_ += need;
  return v;
}

Uploader::Uploader(Device& device, uint64_t staging_bytes)
    : device_(device), staging_bytes_(staging_bytes) {}

Uploader::~Uploader() = default;

void Uploader::Add(BufferView dst, const void* src, uint64_t bytes) {
  Check(bytes <= dst.size, "vulkan: upload of {} bytes into a view of {}", bytes, dst.size);
  if (bytes == 0) return;
  jobs_.push_back({dst, static_cast<const uint8_t*>(src), bytes});
  pending_ += bytes;
}

void Uploader::Run(const std::function<void(uint64_t, uint64_t)>& progress) {
  const uint64_t total = pending_;
  uint64_t done = 0;
  std::unique_ptr<MemoryPool> staging;
  BufferView stage;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  size_t i = 0;
  uint64_t job_off = 0;
  try {
    while (i < jobs_.size()) {
      const Job& j = jobs_[i];
      if (j.dst.host) {  // mapped: write directly
        std::memcpy(j.dst.host, j.src, j.bytes);
        done += j.bytes;
        ++i;
        if (progress) progress(done, total);
        continue;
      }
      if (!staging) {
        staging = std::make_unique<MemoryPool>(device_, MemoryKind::kHost, staging_bytes_);
        stage = staging->Allocate(staging_bytes_, "upload staging buffer");
        cb = device_.AllocateCommandBuffer();
      }
      // Fill the staging buffer with as many unmapped chunks as fit, then copy on the device.
      VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
      bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
      CheckVk(vkBeginCommandBuffer(cb, &bi), "vkBeginCommandBuffer");
      uint64_t used = 0;
      while (i < jobs_.size() && !jobs_[i].dst.host && used < stage.size) {
        const Job& jj = jobs_[i];
        const uint64_t n = std::min(jj.bytes - job_off, stage.size - used);
        std::memcpy(stage.host + used, jj.src + job_off, n);
        VkBufferCopy region{stage.offset + used, jj.dst.offset + job_off, n};
        vkCmdCopyBuffer(cb, stage.buffer, jj.dst.buffer, 1, &region);
        used += n;
        job_off += n;
        if (job_off == jj.bytes) {
          ++i;
          job_off = 0;
        }
      }
      // Make the copies visible to every later command (they run in later submissions).
      VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
      mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                         VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
      vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
                           VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0,
                           1, &mb, 0, nullptr, 0, nullptr);
      CheckVk(vkEndCommandBuffer(cb), "vkEndCommandBuffer");
      device_.SubmitAndWait(cb);
      CheckVk(vkResetCommandBuffer(cb, 0), "vkResetCommandBuffer");
      done += used;
      if (progress) progress(done, total);
    }
  } catch (...) {
    device_.FreeCommandBuffer(cb);
    throw;
  }
  device_.FreeCommandBuffer(cb);
  jobs_.clear();
  pending_ = 0;
}

void WriteBuffer(Device& device, BufferView dst, const void* src, uint64_t bytes) {
  Uploader up(device, std::max<uint64_t>(AlignUp(bytes, 4096), 4096));
  up.Add(dst, src, bytes);
  up.Run();
}

void ReadBuffer(Device& device, BufferView src, void* dst, uint64_t bytes) {
  Check(bytes <= src.size, "vulkan: read of {} bytes from a view of {}", bytes, src.size);
  if (src.host) {
    std::memcpy(dst, src.host, bytes);
    return;
  }
  MemoryPool staging(device, MemoryKind::kHost, std::max<uint64_t>(AlignUp(bytes, 4096), 4096));
  BufferView s = staging.Allocate(bytes, "read-back staging buffer");
  device.RunOnce([&](VkCommandBuffer cb) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
    VkBufferCopy region{src.offset, s.offset, bytes};
    vkCmdCopyBuffer(cb, src.buffer, s.buffer, 1, &region);
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb,
                         0, nullptr, 0, nullptr);
  });
  std::memcpy(dst, s.host, bytes);
}

bool SupportsMatrix(GgmlType type, int64_t n_in) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0:
      return n_in > 0 && n_in % 32 == 0;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return n_in > 0 && n_in % 256 == 0;
    default:
      return false;
  }
}

namespace {

// Splits m into pieces of whole units (rows, or experts for stacks) that fit one binding.
void PlanPieces(MemoryPool& pool, DeviceMatrix& m, std::string_view name) {
  Check(SupportsMatrix(m.type, m.n_in),
        "vulkan: {}: no shader for {} matrices with {} inputs (supported: F32, F16, BF16, Q4_0, "
        "Q8_0 with a multiple of 32; Q4_K, Q5_K, Q6_K with a multiple of 256)",
        name, TypeName(m.type), m.n_in);
  Check(m.n_out > 0 && m.n_expert > 0, "vulkan: {}: empty matrix", name);
  m.row_bytes = *RowBytes(m.type, m.n_in);
  const bool stack = m.n_expert > 1;
  const uint64_t unit = stack ? m.expert_bytes() : m.row_bytes;
  const int64_t units = stack ? m.n_expert : m.n_out;
  const uint64_t limit = pool.device().max_binding_bytes() - pool.device().alignment();
  Check(unit <= limit, "vulkan: {}: one {} of {} bytes exceeds the {} bytes one binding may span",
        name, stack ? "expert" : "row", unit, limit);
  const int64_t per_piece = static_cast<int64_t>(limit / unit);
  m.pieces.clear();
  for (int64_t first = 0; first < units; first += per_piece) {
    DeviceMatrix::Piece p;
    p.first = first;
    p.count = std::min(per_piece, units - first);
    p.view = pool.Allocate(unit * static_cast<uint64_t>(p.count),
                           fmt::format("{} (piece {})", name, m.pieces.size()));
    m.pieces.push_back(p);
  }
}

}  // namespace

void AllocateMatrix(MemoryPool& pool, DeviceMatrix& m, std::string_view name) {
  PlanPieces(pool, m, name);
}

void UploadMatrix(MemoryPool& pool, Uploader& up, DeviceMatrix& m, const void* data,
                  std::string_view name) {
  PlanPieces(pool, m, name);
  const uint64_t unit = m.n_expert > 1 ? m.expert_bytes() : m.row_bytes;
  const auto* src = static_cast<const uint8_t*>(data);
  for (const DeviceMatrix::Piece& p : m.pieces) {
    up.Add(p.view, src + unit * static_cast<uint64_t>(p.first), p.view.size);
  }
}

void UploadGateUp(MemoryPool& pool, Uploader& up, DeviceMatrix& m, const void* gate,
                  const void* up_rows, std::string_view name) {
  Check(m.n_out % 2 == 0, "vulkan: {}: gate/up matrix needs an even n_out (2 x n_ff)", name);
  PlanPieces(pool, m, name);
  Check(m.n_expert > 1 || m.pieces.size() == 1,
        "vulkan: {}: a single gate/up matrix must fit one binding", name);
  const uint64_t half = m.expert_bytes() / 2;
  const auto* g = static_cast<const uint8_t*>(gate);
  const auto* u = static_cast<const uint8_t*>(up_rows);
  for (const DeviceMatrix::Piece& p : m.pieces) {
    const int64_t experts = m.n_expert > 1 ? p.count : 1;  // a plain matrix: pieces are rows
    for (int64_t e = 0; e < experts; ++e) {
      const uint64_t src = static_cast<uint64_t>(p.first + e) * half;
      const uint64_t dst = static_cast<uint64_t>(e) * m.expert_bytes();
      up.Add(p.view.Sub(dst, half), g + src, half);
      up.Add(p.view.Sub(dst + half, half), u + src, half);
    }
  }
}

BufferView UploadBytes(MemoryPool& pool, Uploader& up, const void* data, uint64_t bytes,
                       std::string_view name) {
  BufferView v = pool.Allocate(bytes, name);
  up.Add(v, data, bytes);
  return v;
}

}  // namespace crossword::vulkan
