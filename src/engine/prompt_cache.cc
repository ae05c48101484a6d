// PromptCache: resume-point search, checkpoint planning and bookkeeping for one slot.
#include "engine/prompt_cache.h"

#include <algorithm>

#include "base/error.h"

namespace crossword::engine {

int64_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

PromptCache::PromptCache(PromptCacheOptions options) : options_(options) {
  Check(options_.interval >= 1, "prompt cache: checkpoint interval must be >= 1 (got {})",
        options_.interval);
  Check(options_.max_checkpoints >= 1, "prompt cache: max checkpoints must be >= 1 (got {})",
        options_.max_checkpoints);
}

std::vector<int64_t> PromptCache::checkpoint_positions() const {
  std::vector<int64_t> out;
  for (const auto& c : checkpoints_) out.push_back(c.n_past);
  return out;
}

int64_t PromptCache::ResumePoint(std::span<const int32_t> prompt,
                                 const model::SequenceState& state) const {
  if (prompt.empty()) return 0;
  const int64_t limit = static_cast<int64_t>(prompt.size()) - 1;  // keep one token to evaluate
  const int64_t held = std::min<int64_t>(state.n_past(), static_cast<int64_t>(tokens_.size()));
  const int64_t common = CommonPrefix(std::span(tokens_).first(static_cast<size_t>(held)), prompt);
  // The live state itself, when everything it holds is a prefix of the prompt.
  if (common == state.n_past() && common <= limit) return common;
  const int64_t bound = std::min(common, limit);
  for (auto it = checkpoints_.rbegin(); it != checkpoints_.rend(); ++it) {
    if (it->n_past <= bound && state.CanRestore(*it)) return it->n_past;
  }
  return 0;
}

int64_t PromptCache::Resume(std::span<const int32_t> prompt, model::SequenceState& state) {
  const int64_t r = ResumePoint(prompt, state);
  if (r != state.n_past()) {
    auto it = std::find_if(checkpoints_.begin(), checkpoints_.end(),
                           [&](const model::StateSnapshot& s) { return s.n_past == r; });
    if (r > 0 && it != checkpoints_.end() && state.CanRestore(*it)) {
      state.Restore(*it);
    } else {
      state.Reset();
      checkpoints_.clear();
    }
  }
  // Rows at and past the resume point will be rewritten: later checkpoints become stale.
  std::erase_if(checkpoints_,
                [&](const model::StateSnapshot& s) { return s.n_past > state.n_past(); });
  tokens_.assign(prompt.begin(), prompt.end());
  return state.n_past();
}

std::vector<int64_t> PromptCache::PlanCheckpoints(std::span<const int32_t> prompt,
                                                  int64_t from) const {
  const int64_t n = static_cast<int64_t>(prompt.size());
  std::vector<int64_t> out;
  // Spread the interval checkpoints so one prompt never holds more than max_checkpoints of them.
  const int64_t per = options_.max_checkpoints;
  const int64_t interval = std::max<int64_t>(options_.interval, (n + per - 1) / per);
  for (int64_t p = interval; p < n; p += interval) {
    if (p > from) out.push_back(p);
  }
  if (options_.turn_start) {
    for (int64_t i = n - 1; i > 0; --i) {
      if (prompt[static_cast<size_t>(i)] == *options_.turn_start) {
        if (i > from) out.push_back(i);
        break;
      }
    }
  }
  // Just before the last token (where prefill hands over to the generation anyway): the same
  // prompt sent again re-runs only its last token, however short it is and whatever it holds.
  if (n >= 2 && n - 1 > from) out.push_back(n - 1);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void PromptCache::AddCheckpoint(const model::SequenceState& state) {
  const int64_t n = state.n_past();
  auto it = std::find_if(checkpoints_.begin(), checkpoints_.end(),
                         [&](const model::StateSnapshot& s) { return s.n_past >= n; });
  if (it == checkpoints_.end() || it->n_past != n)
    it = checkpoints_.insert(it, model::StateSnapshot{});
  state.SaveSnapshot(*it);
  // Keep the most recent positions: a follow-up request extends the latest conversation.
  const size_t keep = static_cast<size_t>(options_.max_checkpoints);
  if (checkpoints_.size() > keep)
    checkpoints_.erase(checkpoints_.begin(), checkpoints_.end() - keep);
}

void PromptCache::Commit(std::span<const int32_t> tokens, model::SequenceState& state) {
  if (static_cast<int64_t>(tokens.size()) < state.n_past()) {
    Clear(state);  // the state holds tokens nobody recorded: never resume from it
    return;
  }
  tokens_.assign(tokens.begin(), tokens.begin() + state.n_past());
  std::erase_if(checkpoints_,
                [&](const model::StateSnapshot& s) { return s.n_past > state.n_past(); });
}

void PromptCache::Clear(model::SequenceState& state) {
  state.Reset();
  tokens_.clear();
  checkpoints_.clear();
}

}  // namespace crossword::engine
