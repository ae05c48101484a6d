// Device memory of the Vulkan backend: a few large allocations sub-allocated into aligned
// views, staged uploads from host memory (the mapped GGUF) with a progress callback, and weight
// matrices split into pieces that each fit one descriptor binding (maxStorageBufferRange is
// 128 MiB on lavapipe; an output head or an expert stack can be larger). docs/gpu.md.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/vulkan/device.h"
#include "core/types.h"

namespace crossword::vulkan {

/// A byte range of a VkBuffer. `host` points at its first byte when the memory is mapped
/// (host-visible pools, and device pools on devices whose device-local memory is host-visible,
/// such as lavapipe and integrated GPUs); else nullptr. A default view is "none".
struct BufferView {
  VkBuffer buffer = VK_NULL_HANDLE;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint8_t* host = nullptr;

  bool valid() const { return buffer != VK_NULL_HANDLE && size > 0; }
  /// The sub-range [off, off + bytes). Throws crossword::Error when it leaves this view.
  BufferView Sub(uint64_t off, uint64_t bytes) const;
  /// Sub() in units of T (elements first .. first + count).
  template <typename T>
  BufferView Elems(uint64_t first, uint64_t count) const {
    return Sub(first * sizeof(T), count * sizeof(T));
  }
};

enum class MemoryKind {
  kDevice,  ///< DEVICE_LOCAL (mapped too where the device offers it without a cost)
  kHost,    ///< HOST_VISIBLE | HOST_COHERENT (cached when available): step parameters, read-back
};

/// A bump allocator over a few large VkDeviceMemory blocks, each with one VkBuffer spanning it
/// (usage: storage + transfer). Views are aligned to Device::alignment(). Memory is released
/// all at once by the destructor. Not thread-safe.
class MemoryPool {
 public:
  /// block_bytes: size of each block (a request larger than that gets its own block).
  MemoryPool(Device& device, MemoryKind kind, uint64_t block_bytes = uint64_t{256} << 20);
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  /// A view of `bytes` (> 0). Throws crossword::Error naming `what`, the bytes needed, those
  /// already allocated and the heap size when the device is out of memory.
  BufferView Allocate(uint64_t bytes, std::string_view what);
  uint64_t allocated_bytes() const { return allocated_; }
  uint64_t reserved_bytes() const { return reserved_; }
  /// Whether views of this pool have a host pointer.
  bool mapped() const { return mapped_; }
  Device& device() { return device_; }

 private:
  struct Block {
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkBuffer buffer = VK_NULL_HANDLE;
    uint64_t size = 0;
    uint64_t used = 0;
    uint8_t* mapped = nullptr;
  };
  Block& NewBlock(uint64_t bytes, std::string_view what);

  Device& device_;
  MemoryKind kind_;
  uint64_t block_bytes_;
  uint32_t memory_type_ = 0;
  uint32_t heap_ = 0;
  bool mapped_ = false;
  std::vector<Block> blocks_;
  uint64_t allocated_ = 0;
  uint64_t reserved_ = 0;
};

/// Copies host memory into views. Views with a host pointer are written directly; the others
/// through a host-visible staging buffer and transfer commands, chunk by chunk. Add() only
/// records the job (the source must stay valid until Run returns).
class Uploader {
 public:
  explicit Uploader(Device& device, uint64_t staging_bytes = uint64_t{64} << 20);
  ~Uploader();
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;

  /// Queues a copy of `bytes` from `src` to the start of `dst` (bytes <= dst.size).
  void Add(BufferView dst, const void* src, uint64_t bytes);
  uint64_t pending_bytes() const { return pending_; }
  /// Performs every queued copy; progress(done, total) after each chunk. Throws on failure.
  void Run(const std::function<void(uint64_t done, uint64_t total)>& progress = {});

 private:
  struct Job {
    BufferView dst;
    const uint8_t* src;
    uint64_t bytes;
  };
  Device& device_;
  uint64_t staging_bytes_;
  std::vector<Job> jobs_;
  uint64_t pending_ = 0;
};

/// Immediate copies for tests and small data (allocate a staging buffer per call when the view
/// has no host pointer; not for a pass).
void WriteBuffer(Device& device, BufferView dst, const void* src, uint64_t bytes);
void ReadBuffer(Device& device, BufferView src, void* dst, uint64_t bytes);

/// A weight matrix in device memory, in the file's layout (GGUF rows of `row_bytes`, no
/// re-quantization): n_expert matrices of n_out rows of n_in elements (n_expert = 1 for a plain
/// matrix). Stored as pieces that each fit one binding: a plain matrix is split by rows, an
/// expert stack by whole experts. Piece i covers rows (or experts) [first, first + count).
struct DeviceMatrix {
  struct Piece {
    BufferView view;
    int64_t first = 0;
    int64_t count = 0;
  };
  GgmlType type = GgmlType::kF32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  int64_t n_expert = 1;
  uint64_t row_bytes = 0;
  /// A matrix of this shape, not yet uploaded (UploadMatrix / UploadGateUp fill the rest).
  static DeviceMatrix Of(GgmlType type, int64_t n_in, int64_t n_out, int64_t n_expert = 1) {
    DeviceMatrix m;
    m.type = type;
    m.n_in = n_in;
    m.n_out = n_out;
    m.n_expert = n_expert;
    return m;
  }
  uint64_t expert_bytes() const { return row_bytes * static_cast<uint64_t>(n_out); }
  std::vector<Piece> pieces;
  uint64_t bytes() const { return expert_bytes() * static_cast<uint64_t>(n_expert); }
};

/// Whether the shaders have kernels for a weight type (F32, F16, BF16, Q4_0, Q8_0, Q4_K, Q5_K,
/// Q6_K) and n_in fits them (a multiple of 32, of 256 for K-quants).
bool SupportsMatrix(GgmlType type, int64_t n_in);

/// Allocates `m` (type and shape set by the caller, pieces empty) from `pool` and queues the
/// upload of `data` (n_expert * n_out rows of RowBytes(type, n_in), the GGUF tensor bytes).
/// Throws crossword::Error for an unsupported type/shape or an expert larger than a binding.
void UploadMatrix(MemoryPool& pool, Uploader& up, DeviceMatrix& m, const void* data,
                  std::string_view name);
/// Allocates `m`'s pieces without uploading anything (weights generated on the device).
void AllocateMatrix(MemoryPool& pool, DeviceMatrix& m, std::string_view name);
/// The fused gate/up form the MoE kernels read: per expert n_ff gate rows then n_ff up rows
/// (n_out = 2 n_ff; llama.cpp's merged ffn_gate_up_exps has this layout). gate and up are two
/// GGUF tensors of n_expert * n_ff rows of the same type.
void UploadGateUp(MemoryPool& pool, Uploader& up, DeviceMatrix& m, const void* gate,
                  const void* up_rows, std::string_view name);

/// Allocates and queues the upload of plain bytes (norm weights, biases, tables).
BufferView UploadBytes(MemoryPool& pool, Uploader& up, const void* data, uint64_t bytes,
                       std::string_view name);

}  // namespace crossword::vulkan
