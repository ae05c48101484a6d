// What distinguishes the official (fork) Clover GGUF layout from the upstream llama.cpp layout,
// shared by `gguf inspect` (verdict), `gguf patch` (fix) and `gguf synth` (both forms).
// Facts: ../shared/clover-facts.md, "The official GGUF files".
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace crossword::tools {

/// `<arch>.expert_shared_count`: missing in the official files, required upstream (value 1).
std::string SharedExpertCountKey(std::string_view arch);

/// True if `name` is one of the diffusion-only tensors (model/schema.h, Presence::kDiffusionOnly).
bool IsDiffusionTensor(std::string_view name);

/// True for a GDN decay tensor `blk.N.ssm_a` (no `.weight` suffix).
bool IsSsmA(std::string_view name);

/// Layer index of a `blk.N.` tensor name, or -1.
int LayerOfTensor(std::string_view name);

/// Which of the three official-vs-upstream differences a file shows.
struct LayoutReport {
  bool is_clover_family = false;  ///< architecture clover_moe or qwen35moe
  std::string architecture;
  bool missing_shared_expert_count = false;  ///< difference 1
  int diffusion_tensors = 0;                 ///< difference 2: how many of them are present
  int ssm_a_tensors = 0;                     ///< GDN decay vectors found
  /// Difference 3: ssm_a vectors with an element >= 0, which -exp(x) can never produce, so they
  /// hold raw A_log. (A raw A_log vector that happens to be all negative is not detectable from
  /// its values; the other two differences then decide.)
  int ssm_a_raw_a_log = 0;
  /// "official (fork) layout", "upstream layout", or "mixed layout" (some but not all).
  std::string verdict;
  /// Human-readable lines, one per difference present.
  std::vector<std::string> differences;
  bool is_official() const { return verdict == "official (fork) layout"; }
  bool is_upstream() const { return verdict == "upstream layout"; }
};

/// Examines metadata and tensors of a clover_moe/qwen35moe file. For other architectures
/// `is_clover_family` is false and the verdict is "not a Clover/qwen35moe file".
///
/// Verdicts: "upstream layout" = key present, no diffusion tensors, no ssm_a element >= 0;
/// "official (fork) layout" = key missing and the diffusion tensors present (ssm_a is then
/// taken to hold A_log, as the facts say); anything else is "mixed layout". ssm_a tensors of
/// any float or quantized type are dequantized to look at their values.
LayoutReport ExamineLayout(const gguf::File& file);

}  // namespace crossword::tools
