// RepackWeights: the CPU executor's tile-layout copies of quantized matrices.
#include "backends/cpu/repack.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

namespace crossword::backends::cpu {

using model::ExpertTensor;
using model::LayerWeights;
using model::Weights;

size_t RepackAllowance(size_t physical_bytes, size_t file_bytes) {
  const size_t quarter = physical_bytes / 4;
  const size_t room =
      physical_bytes > file_bytes + quarter ? physical_bytes - file_bytes - quarter : 0;
  return std::min(quarter, room);
}

namespace {
// Gives back the whole pages inside [p, p + n) of a read-only file mapping (RepackWeights).
void ReleaseFilePages(const void* p, size_t n) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (a + page - 1) / page * page, hi = (a + n) / page * page;
  if (hi <= lo) return;
  void* start = reinterpret_cast<void*>(lo);
#ifdef MADV_PAGEOUT
  // Reclaims the pages now where no other process maps them and the kernel allows it for this
  // file (recent kernels only page out file pages the process could write); otherwise
  // MADV_DONTNEED below leaves them to the page cache's normal reclaim.
  ::madvise(start, hi - lo, MADV_PAGEOUT);
#endif
  ::madvise(start, hi - lo, MADV_DONTNEED);
}
}  // namespace

size_t RepackWeights(Weights& w, const RepackLimits& limits, const Logger& logger,
                     ThreadPool* pool) {
  const std::span<const std::byte> file_mapping = limits.file_mapping;
  // Every matrix once; the routed experts' stacks are one entry with n_expert copies.
  struct Target {
    kernels::Matrix* m;
    ExpertTensor* experts;
  };
  std::vector<Target> targets{{&w.output, nullptr}};
  for (size_t il = static_cast<size_t>(std::max(0, limits.first_layer)); il < w.layers.size();
       ++il) {
    LayerWeights& L = w.layers[il];
    for (kernels::Matrix* m : L.DenseMatrices()) targets.push_back({m, nullptr});
    for (ExpertTensor* e : L.ExpertStacks()) targets.push_back({&e->first, e});
  }
  // One job per matrix (per expert for stacks), laid out back to back at 64-byte boundaries.
  struct Job {
    kernels::Matrix m;
    size_t offset;
    bool replaces;  ///< its source pages are released once the copy is written
  };
  std::vector<Job> jobs;
  struct Placed {
    const Target* t;
    size_t offset;  ///< of its first copy
    size_t stride;  ///< bytes from one expert's copy to the next
  };
  std::vector<Placed> placed;
  // In the order of `targets`, the output head first: every row of every pass that needs logits
  // multiplies it, so when not everything fits (a mid-size file; RepackAllowance gives a
  // full-size one none) the head's copy comes before any layer's.
  // Each matrix is taken when it fits in what is left of the limits (RepackLimits).
  size_t total = 0, added = 0, left_out = 0;  // total: every copy; added: those not replacing
  // Copies that would replace file pages had the file been mapped: all, and those made.
  size_t unmapped = 0, unmapped_made = 0;
  int n_left_out = 0;
  for (const Target& t : targets) {
    if (!t.m->data) continue;
    const size_t bytes = kernels::RepackedBytes(*t.m);
    if (bytes == 0) continue;
    const size_t stride = (bytes + 63) / 64 * 64;
    const int copies = t.experts ? t.experts->n_expert : 1;
    const size_t all = stride * static_cast<size_t>(copies);
    // Only weights that are the mapping's own bytes (a tensor converted at load lives in this
    // process's memory, which a release would zero).
    const size_t matrix_bytes = static_cast<size_t>(t.m->n_out) * t.m->row_bytes;
    const size_t file_bytes =
        t.experts ? t.experts->expert_stride * static_cast<size_t>(copies) : matrix_bytes;
    const auto src = reinterpret_cast<uintptr_t>(t.m->data);
    const auto map0 = reinterpret_cast<uintptr_t>(file_mapping.data());
    const bool in_mapping =
        !file_mapping.empty() && src >= map0 && src - map0 + file_bytes <= file_mapping.size();
    const bool replaces = in_mapping && bytes <= matrix_bytes;
    const bool would_replace = file_mapping.empty() && bytes <= matrix_bytes;
    if (would_replace) unmapped += all;
    const bool fits =
        total + all <= limits.max_total && (replaces || added + all <= limits.max_added);
    if (!fits) {
      left_out += all;
      ++n_left_out;
      continue;
    }
    if (!replaces) added += all;
    if (would_replace) unmapped_made += all;
    placed.push_back({&t, total, stride});
    for (int e = 0; e < copies; ++e) {
      jobs.push_back({t.experts ? t.experts->Expert(e) : *t.m, total, replaces});
      total += stride;
    }
  }
  if (unmapped > 0 && !limits.no_mapping_reason.empty()) {
    logger.Info(
        "{:.1f} MiB of tile copies could replace the file's pages of the same weights, but {}: "
        "copies add to memory instead ({:.1f} MiB of them fit the allowance)",
        unmapped / 1048576.0, limits.no_mapping_reason, unmapped_made / 1048576.0);
  }
  if (n_left_out > 0) {
    logger.Info(
        "{} matrices not repacked: their tile copies would take {:.1f} MiB more than allowed "
        "({:.1f} MiB that add to the model's memory, {:.1f} MiB in all; their passes of 4+ rows "
        "repack on the fly)",
        n_left_out, left_out / 1048576.0, limits.max_added / 1048576.0,
        limits.max_total / 1048576.0);
  }
  if (total == 0) return 0;
  // Anonymous pages, uninitialized (every byte is written by Repack; zero-filling gigabytes
  // first cost seconds), in 2 MiB transparent huge pages where the kernel allows them
  // (MADV_HUGEPAGE; best effort): with 4 KiB pages a pass streaming the head's 0.7 GB copy
  // evicted the page-table entries of the file's head, and the next one-row product, which
  // reads the file's rows, measured up to 1.8x slower. The allowance counts the memory limit
  // (physical or a cgroup's); an address-space limit (ulimit -v) may still refuse the block, and
  // the model works without it.
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t map_bytes = (total + 2 * kHuge - 1) / kHuge * kHuge;
  void* mem =
      ::mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    logger.Warn(
        "weights not repacked: {:.1f} MiB for the tile copies could not be mapped (passes of 4+ "
        "rows repack on the fly; --no-repack skips this attempt)",
        total / 1048576.0);
    return 0;
  }
  w.packed_storage = std::shared_ptr<std::byte[]>(
      static_cast<std::byte*>(mem), [map_bytes](std::byte* q) { ::munmap(q, map_bytes); });
  const auto addr = reinterpret_cast<uintptr_t>(mem);
  std::byte* base = static_cast<std::byte*>(mem) + (kHuge - addr % kHuge) % kHuge;
  ::madvise(base, total, MADV_HUGEPAGE);
  auto run = [&](int64_t j, int) {
    const kernels::Matrix& m = jobs[j].m;
    kernels::Repack(m, base + jobs[j].offset);
    if (jobs[j].replaces) ReleaseFilePages(m.data, static_cast<size_t>(m.n_out) * m.row_bytes);
  };
  if (pool) {
    pool->ParallelFor(static_cast<int64_t>(jobs.size()), run);
  } else {
    for (size_t j = 0; j < jobs.size(); ++j) run(static_cast<int64_t>(j), 0);
  }
  for (const Placed& p : placed) {
    p.t->m->packed = base + p.offset;
    if (p.t->experts) p.t->experts->packed_stride = p.stride;
  }
  logger.Info("repacked {} matrices into the VNNI tile layout ({:.1f} MiB, bit-identical results)",
              placed.size(), total / 1048576.0);
  if (const size_t replaced = total - added; replaced > 0) {
    logger.Info(
        "{:.1f} MiB of those copies replace the file's pages of the same weights (those pages "
        "are released; read from the file again if ever needed)",
        replaced / 1048576.0);
  }
  return total;
}

}  // namespace crossword::backends::cpu
