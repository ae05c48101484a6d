// The CPU executor's tile-layout copies of quantized matrices (kernels::Repack).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "base/log.h"
#include "base/memory_limit.h"
#include "core/thread_pool.h"
#include "model/weights.h"

namespace crossword::backends::cpu {

/// What RepackWeights may take.
struct RepackLimits {
  /// Copies that add to the process's memory (RepackAllowance).
  size_t max_added = 0;
  /// All copies, replacing ones included: anonymous memory, which (unlike a mapped file's page
  /// cache) cannot be reclaimed without swap, so it stays below the memory limit (physical
  /// memory or a cgroup's, ProcessMemoryLimit) less a quarter (RepackCap) whatever the file's size.
  size_t max_total = 0;
  /// The model file's bytes when they are a read-only mapping of it, not locked
  /// (gguf::File::refaultable_bytes); empty otherwise. See RepackWeights.
  std::span<const std::byte> file_mapping;
  /// Why file_mapping is empty ("the model was read into memory (--no-mmap)"), for the log line
  /// that says copies which could have replaced file pages add to memory instead; "" says none.
  std::string_view no_mapping_reason;
  /// Layers below it run on another executor (`-ngl N`): no copies for them.
  int first_layer = 0;
};

/// Gives matrices that have a tile layout on this CPU (kernels::RepackedBytes: Q8_0, Q4_0, Q4_K,
/// Q5_K, Q6_K on AVX-512 VNNI) a repacked copy, so passes of 4+ rows (prompts, diffusion blocks,
/// spec verify) stop repacking weights on every call (Q8_0 and Q4_0 decode read it too). Results
/// are bit-identical with or without it. The output head goes first, then the layers from
/// `limits.first_layer` in order, each matrix (an expert stack as a whole) taken while the copies
/// fit; what does not fit is named in one log line, and a failed allocation skips them all.
///
/// With `limits.file_mapping`, a copy of a matrix that lies in it and is no larger than the file
/// bytes it repacks (Q4_0's tiles have the file's size) replaces them: it is counted against
/// max_total only, not max_added, and once written its source pages are given back
/// (MADV_PAGEOUT where the kernel allows it for this file, then MADV_DONTNEED: the page cache may
/// drop them; a later read of those rows, which only a product without a copy or an embedding
/// lookup of a tied head makes, faults them in again). So a full-size Q4_0 file gets its copies
/// on a machine that holds it once. Matrices are repacked in parallel on `pool` when given.
/// Returns the bytes used (0 when none).
size_t RepackWeights(model::Weights& w, const RepackLimits& limits, const Logger& logger,
                     ThreadPool* pool = nullptr);

/// The memory RepackWeights may use: a quarter of `physical_bytes` (the memory limit: physical
/// memory, or a container's cgroup limit when lower, ProcessMemoryLimit), and no more than leaves
/// the mapped model file (`file_bytes`) plus another quarter (KV caches, activations, the rest of
/// the system) resident beside the copies: a full-size file (the 19.7 GB Q4_0 Clover on a 24 GB
/// machine) gets no copies that add to it rather than a page cache that thrashes (copies that
/// replace file pages are outside this allowance: RepackWeights).
size_t RepackAllowance(size_t physical_bytes, size_t file_bytes);

/// RepackLimits::max_total: the memory limit (`physical_bytes`: physical memory or a cgroup's)
/// less a quarter (KV caches, activations, the rest of the system); 0 when the model file
/// (`file_bytes`) would not leave an eighth of the limit (HoldableBytes, as --no-mmap): copies
/// that replace its pages hold it in memory that cannot be paged out, so a process whose other
/// memory grows (KV caches) would meet the limit with nothing the kernel can reclaim, while the
/// file's pages can be dropped and read again. (The 2.6 GB 4-layer file under a 2 GiB cgroup, 2
/// alternated pairs: generation 10.4 / 10.4 tokens/s with 1,516 MiB of copies, 11.1 / 8.5
/// without; the load 5.3 / 4.0 s against 0.9 / 1.0 s.)
inline size_t RepackCap(size_t physical_bytes, size_t file_bytes) {
  return file_bytes > HoldableBytes(physical_bytes) ? 0 : physical_bytes - physical_bytes / 4;
}

}  // namespace crossword::backends::cpu
