// The CPU executor's tile-layout copies of Q8_0/Q4_0 matrices (kernels::Repack).
#pragma once

#include <cstddef>

#include "base/log.h"
#include "core/thread_pool.h"
#include "model/weights.h"

namespace crossword::backends::cpu {

/// Gives every matrix that has a tile layout on this CPU (kernels::RepackedBytes: Q8_0 / Q4_0 on
/// AVX-512 VNNI) a repacked copy, so passes of 4+ rows (prompts, diffusion blocks, spec verify)
/// stop repacking weights on every call (Q8_0 decode reads it too). Results are bit-identical
/// with or without it. Skipped, with a log line, when the copies would take more than
/// `max_bytes` or their allocation fails. Matrices are repacked in parallel on `pool` when
/// given. Returns the bytes used (0 when skipped).
size_t RepackWeights(model::Weights& w, size_t max_bytes, const Logger& logger,
                     ThreadPool* pool = nullptr);

}  // namespace crossword::backends::cpu
