// The CPU executor's tile-layout copies of quantized matrices (kernels::Repack).
#pragma once

#include <cstddef>
#include <span>

#include "base/log.h"
#include "core/thread_pool.h"
#include "model/weights.h"

namespace crossword::backends::cpu {

/// Gives matrices that have a tile layout on this CPU (kernels::RepackedBytes: Q8_0, Q4_0, Q4_K,
/// Q5_K, Q6_K on AVX-512 VNNI) a repacked copy, so passes of 4+ rows (prompts, diffusion blocks,
/// spec verify) stop repacking weights on every call (Q8_0 and Q4_0 decode read it too). Results
/// are bit-identical with or without it. The output head goes first, then the layers in order,
/// each matrix (an expert stack as a whole) taken while the copies fit in `max_bytes`; what does
/// not fit is named in one log line, and a failed allocation skips them all.
///
/// With `file_mapping` (the model file's bytes when they are a read-only mapping of it, not
/// locked; empty otherwise), a copy of a matrix that lies in it and is no larger than the file
/// bytes it repacks (Q4_0's tiles have the file's size) replaces them:
/// counted outside `max_bytes`, and once written its source pages are given back (MADV_PAGEOUT,
/// then MADV_DONTNEED: the page cache may drop them; a later read of the file's rows, which only
/// a product without a copy makes, faults them in again), so the process holds what the mapped
/// file would. That is how a full-size Q4_0 file gets its copies on a machine that holds it once.
/// Matrices are repacked in parallel on `pool` when given. Returns the bytes used (0 when none).
size_t RepackWeights(model::Weights& w, size_t max_bytes, const Logger& logger,
                     ThreadPool* pool = nullptr, std::span<const std::byte> file_mapping = {});

/// The memory RepackWeights may use: a quarter of `physical_bytes`, and no more than leaves the
/// mapped model file (`file_bytes`) plus another quarter (KV caches, activations, the rest of
/// the system) resident beside the copies: a full-size file (the 19.7 GB Q4_0 Clover on a 24 GB
/// machine) gets no copies that add to it rather than a page cache that thrashes (copies that
/// replace file pages are outside this allowance: RepackWeights).
size_t RepackAllowance(size_t physical_bytes, size_t file_bytes);

}  // namespace crossword::backends::cpu
