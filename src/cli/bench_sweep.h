// `crossword bench --passes --sweep`: the cost of AR-step, verify and denoise passes by rows, each
// beside its floor on this machine (bytes read / measured read bandwidth, multiply-adds /
// measured int8 rate) and the distinct experts per layer it used
// (../shared/parallel-decoding-notes.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "model/forward.h"

namespace crossword::cli {

/// Best of 5 parallel reads of `bytes` bytes at `data` (summed as 64-bit words, 4 MiB per task),
/// in GB/s.
double ReadBandwidthOf(const void* data, size_t bytes, ThreadPool& pool);

/// One AR-step sample as AR decoding runs its steps: from the restored `snap` (renewed after),
/// a forward pass of one token for each of `tokens` back to back (so each routes to other
/// experts, streamed from memory as in decoding), the first untimed: the first step after a
/// multi-row pass measured up to 1.8x slower (what a pass of many rows streamed, e.g. the head's
/// tile copy, evicts what the one-row path reads) and would flatter every "x AR step" ratio.
/// Returns the mean of the other steps in ms; `ctx` holds the last step's counters. Needs
/// tokens.size() >= 2.
double TimeArStep(const model::Executor& x, model::ForwardContext& ctx, model::SequenceState& st,
                  model::StateSnapshot& snap, std::span<const int32_t> tokens);

struct SweepOptions {
  std::vector<int64_t> rows = {1, 2, 4, 8, 16, 32};  ///< T of the passes (1 = the AR step only)
  int reps = 5;                                      ///< measured runs (median reported)
  int warmup = 1;
  bool json = false;       ///< one JSON object per pass on `out` instead of a markdown table
  std::string model_name;  ///< for the JSON rows
};

/// Times, at the context `prompt` leaves committed, one AR step and for every T >= 2 of
/// options.rows a verify pass (causal, recording, T logit rows) and a denoise pass ([seed, MASK x
/// T-1] when the model has a mask token, logits for the T-1 rows that predict a slot), and prints
/// each median beside its floor and its ratio to it. Interleaves the passes over the repetitions.
/// `info` gets the machine figures (read bandwidth, int8 rate, load average).
void RunPassSweep(const engine::Engine& e, std::span<const int32_t> prompt,
                  const SweepOptions& options, FILE* out, FILE* info);

}  // namespace crossword::cli
