// RepackWeights: the CPU executor's tile-layout copies of Q8_0/Q4_0 matrices.
#include "backends/cpu/repack.h"

#include <cstdint>
#include <memory>
#include <new>
#include <vector>

namespace crossword::backends::cpu {

using model::ExpertTensor;
using model::LayerWeights;
using model::Weights;

size_t RepackWeights(Weights& w, size_t max_bytes, const Logger& logger, ThreadPool* pool) {
  // Every matrix once; the routed experts' stacks are one entry with n_expert copies.
  struct Target {
    kernels::Matrix* m;
    ExpertTensor* experts;
  };
  std::vector<Target> targets{{&w.output, nullptr}};
  for (LayerWeights& L : w.layers) {
    for (kernels::Matrix* m : L.DenseMatrices()) targets.push_back({m, nullptr});
    for (ExpertTensor* e : L.ExpertStacks()) targets.push_back({&e->first, e});
  }
  // One job per matrix (per expert for stacks), laid out back to back at 64-byte boundaries.
  struct Job {
    kernels::Matrix m;
    size_t offset;
  };
  std::vector<Job> jobs;
  struct Placed {
    const Target* t;
    size_t offset;  ///< of its first copy
    size_t stride;  ///< bytes from one expert's copy to the next
  };
  std::vector<Placed> placed;
  size_t total = 0;
  for (const Target& t : targets) {
    if (!t.m->data) continue;
    const size_t bytes = kernels::RepackedBytes(*t.m);
    if (bytes == 0) continue;
    const size_t stride = (bytes + 63) / 64 * 64;
    placed.push_back({&t, total, stride});
    const int copies = t.experts ? t.experts->n_expert : 1;
    for (int e = 0; e < copies; ++e) {
      jobs.push_back({t.experts ? t.experts->Expert(e) : *t.m, total});
      total += stride;
    }
  }
  if (total == 0) return 0;
  if (total > max_bytes) {
    logger.Info(
        "weights not repacked: the tile copies would take {:.1f} MiB, over the {:.1f} MiB allowed "
        "(passes of 4+ rows repack on the fly)",
        total / 1048576.0, max_bytes / 1048576.0);
    return 0;
  }
  // Uninitialized: every byte is written by Repack (zero-filling gigabytes first cost seconds).
  // The allowance counts physical memory only; an address-space limit (ulimit -v) may still
  // refuse the block, and the model works without it.
  try {
    w.packed_storage = std::make_unique_for_overwrite<std::byte[]>(total + 64);
  } catch (const std::bad_alloc&) {
    logger.Warn(
        "weights not repacked: {:.1f} MiB for the tile copies could not be allocated (passes of 4+ "
        "rows "
        "repack on the fly; --no-repack skips this attempt)",
        total / 1048576.0);
    return 0;
  }
  const auto addr = reinterpret_cast<uintptr_t>(w.packed_storage.get());
  std::byte* base = w.packed_storage.get() + (64 - addr % 64) % 64;
  auto run = [&](int64_t j, int) { kernels::Repack(jobs[j].m, base + jobs[j].offset); };
  if (pool) {
    pool->ParallelFor(static_cast<int64_t>(jobs.size()), run);
  } else {
    for (size_t j = 0; j < jobs.size(); ++j) run(static_cast<int64_t>(j), 0);
  }
  for (const Placed& p : placed) {
    p.t->m->packed = base + p.offset;
    if (p.t->experts) p.t->experts->packed_stride = p.stride;
  }
  logger.Info(
      "repacked {} Q8_0/Q4_0 matrices into the VNNI tile layout ({:.1f} MiB, bit-identical "
      "results)",
      placed.size(), total / 1048576.0);
  return total;
}

}  // namespace crossword::backends::cpu
