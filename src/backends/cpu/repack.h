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

}  // namespace crossword::backends::cpu
