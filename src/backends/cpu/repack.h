// The CPU executor's tile-layout copies of quantized matrices (kernels::Repack).
#pragma once

#include <cstddef>

#include "base/log.h"
#include "core/thread_pool.h"
#include "model/weights.h"

namespace crossword::backends::cpu {

/// Gives matrices that have a tile layout on this CPU (kernels::RepackedBytes: Q8_0, Q4_0, Q4_K,
/// Q5_K, Q6_K on AVX-512 VNNI) a repacked copy, so passes of 4+ rows (prompts, diffusion blocks,
/// spec verify) stop repacking weights on every call (Q8_0 decode reads it too). Results are
/// bit-identical with or without it. The output head goes first, then the layers in order, each
/// matrix (an expert stack as a whole) taken while the copies fit in `max_bytes`; what does not
/// fit is named in one log line, and a failed allocation skips them all. Matrices are repacked
/// in parallel on `pool` when given. Returns the bytes used (0 when none).
size_t RepackWeights(model::Weights& w, size_t max_bytes, const Logger& logger,
                     ThreadPool* pool = nullptr);

/// The memory RepackWeights may use: a quarter of `physical_bytes`, and no more than leaves the
/// mapped model file (`file_bytes`) plus another quarter (KV caches, activations, the rest of
/// the system) resident beside the copies. Decode still reads the file's rows, so a full-size
/// file (the 19.7 GB Q4_0 Clover on a 24 GB machine) gets no copies rather than a page cache
/// that thrashes.
size_t RepackAllowance(size_t physical_bytes, size_t file_bytes);

}  // namespace crossword::backends::cpu
