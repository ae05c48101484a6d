// Prompt cache of one server slot: the tokens its SequenceState holds and Gated DeltaNet state
// checkpoints along them, so a request sharing a prefix resumes instead of prefilling from zero.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "model/forward.h"

namespace crossword::engine {

struct PromptCacheOptions {
  /// Prompt tokens between two interval checkpoints (>= 1). Widened for long prompts so that a
  /// prompt never gets more than `max_checkpoints` of them.
  int64_t interval = 256;
  /// Checkpoints kept per slot (>= 1); the oldest (lowest position) go first. Each costs one GDN
  /// state copy (Clover-35B-A3B: 30 layers x (3 x 8192 + 32 x 128 x 128) floats = 66 MB).
  int max_checkpoints = 8;
  /// A token that opens a chat turn (`<|im_start|>`): a checkpoint is also taken just before its
  /// last occurrence in a prompt, where a re-rendered conversation usually diverges (the template
  /// drops or rewrites the previous answer's reasoning).
  std::optional<int32_t> turn_start;
};

/// What a slot's state holds and where it can go back to. Why checkpoints: the KV cache can be
/// truncated at any length, GDN state cannot (it is a running sum), so going back to length n
/// needs a copy of the GDN state taken at exactly n. Not thread-safe (owned by the scheduler).
///
/// Invariant kept by the caller: the state holds exactly tokens()[0, state.n_past()) and every
/// checkpoint at n was taken when the state held tokens()[0, n).
class PromptCache {
 public:
  explicit PromptCache(PromptCacheOptions options);

  const PromptCacheOptions& options() const { return options_; }
  /// The tokens the state holds (its first n_past are committed).
  const std::vector<int32_t>& tokens() const { return tokens_; }
  /// Positions of the stored checkpoints, ascending.
  std::vector<int64_t> checkpoint_positions() const;

  /// The longest prefix of `prompt` this slot can resume from without recomputing it: the live
  /// state when it holds a prefix of `prompt`, else the latest restorable checkpoint at or before
  /// the divergence point. Always < prompt.size() (the last prompt token must be evaluated to
  /// get logits); 0 when nothing matches.
  int64_t ResumePoint(std::span<const int32_t> prompt, const model::SequenceState& state) const;

  /// Brings `state` to ResumePoint(prompt) (leaves it, restores a checkpoint, or resets it),
  /// forgets checkpoints past that point and records `prompt` as the tokens being committed.
  /// Returns the resume length.
  int64_t Resume(std::span<const int32_t> prompt, model::SequenceState& state);

  /// Positions in (from, prompt.size()) where the caller should stop prefilling and call
  /// AddCheckpoint: every `interval` tokens (widened for long prompts), just before the last
  /// turn start and just before the last token (so an identical prompt re-runs one token).
  /// Ascending.
  std::vector<int64_t> PlanCheckpoints(std::span<const int32_t> prompt, int64_t from) const;

  /// Stores a checkpoint of `state` at its current length (replacing one at the same position),
  /// then drops the oldest ones beyond max_checkpoints.
  void AddCheckpoint(const model::SequenceState& state);

  /// Records what the state holds after a request: `tokens` (prompt + output) cut to
  /// state.n_past(). Checkpoints past n_past are dropped. If `tokens` is shorter than what the
  /// state holds (a caller bug), the slot is cleared instead.
  void Commit(std::span<const int32_t> tokens, model::SequenceState& state);

  /// Forgets everything and resets `state` (after an error left it in an unknown condition).
  void Clear(model::SequenceState& state);

 private:
  PromptCacheOptions options_;
  std::vector<int32_t> tokens_;
  std::vector<model::StateSnapshot> checkpoints_;  // ascending n_past
};

/// Length of the common prefix of two token sequences.
int64_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b);

}  // namespace crossword::engine
