// `crossword gguf patch IN OUT`: rewrites an official (fork) Clover GGUF into the layout upstream
// llama.cpp loads correctly, without re-quantizing anything.
#pragma once

#include <cstdint>
#include <string>

#include "base/log.h"

namespace crossword::tools {

struct PatchOptions {
  std::string input;
  std::string output;
  bool progress = false;  ///< redraw a progress line on stderr
};

struct PatchResult {
  bool nothing_to_do = false;  ///< the input already has the upstream layout: OUT is a copy
  std::string verdict;         ///< layout verdict of the input
  bool key_added = false;
  int tensors_dropped = 0;
  int ssm_a_rewritten = 0;
  uint64_t bytes_written = 0;
  double seconds = 0;
};

/// Applies the three fixes (clover-facts.md, "The official GGUF files"):
///  1. adds `<arch>.expert_shared_count` = 1 (uint32) right after
///     `<arch>.expert_shared_feed_forward_length` (or after the last `<arch>.` key);
///  2. drops the diffusion-only tensors (`blk.N.ssm_bd_history.weight/.bias`,
///     `ssm_bd_logit_scale.weight`, `ssm_conv1d.weight_right`);
///  3. rewrites every `blk.N.ssm_a` as -exp(A_log) in F32 (dequantizing first if needed);
/// and copies every other tensor's bytes unchanged (in-kernel copy where the filesystem allows).
/// The output is written to a temporary name in OUT's directory, fsynced, then renamed, so an
/// interrupted run leaves nothing under OUT. An input that already has the upstream layout gives
/// `nothing_to_do` and OUT as a byte-identical copy of it (the same temporary-then-rename way), so
/// that OUT always exists in the upstream layout after success. Throws crossword::Error when the
/// input is not a clover_moe/qwen35moe GGUF, when OUT is the input file (it is never overwritten),
/// or on I/O errors.
PatchResult PatchToUpstream(const PatchOptions& options, const Logger& log);

}  // namespace crossword::tools
