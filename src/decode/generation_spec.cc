// Generation, self-speculative rounds (docs/decoding.md, "Self-speculative mode"): the draft
// pass's drafts, the verify pass's acceptance (greedy and sampled), chunked verify rows.
#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "decode/generation.h"

namespace crossword::decode {

void Generation::OnDraft(std::span<const float> logits) {
  const int64_t B = block_len_;
  const int64_t gen0 = stats_.generated - 1;  // the seed is emitted already
  verify_len_ = B;
  draft_end_ = -1;
  const bool cut = params_.draft_p_min > 0.0f;
  // Under a grammar the draft is checked along the way: each slot's row is masked at the state
  // after the drafts before it (accepted tentatively, undone below).
  TokenConstraint* c = constraint_.get();
  size_t tentative = 0;
  for (int64_t j = 1; j < B; ++j) {
    // The grammar ended with the previous draft: an end token outside eog_ids (a drafted EOG
    // ends the draft below, before the grammar sees it).
    if (c && c->Terminated()) {
      verify_len_ = j;
      break;
    }
    // Greedy drafts only read the processed row; sampled ones mask the mask token in it.
    const std::span<const float> row = logits.subspan((j - 1) * n_vocab_, n_vocab_);
    std::span<float> w;
    if (!params_.sampling.greedy()) w = Processed(row, gen0 + j, c);
    const std::span<const float> p =
        params_.sampling.greedy() ? ProcessedView(row, gen0 + j, c) : std::span<const float>(w);
    // Sampled drafts without a cut need no argmax.
    const int32_t top = cut || params_.sampling.greedy() ? Sampler::ArgMax(p, params_.mask_id) : -1;
    // Nothing but the mask token allowed here (the request's bans): the draft ends, and the
    // verify row decides as AR would (it may emit the mask token, or fail the request).
    if (top >= 0 && p[static_cast<size_t>(top)] == -std::numeric_limits<float>::infinity()) {
      verify_len_ = j;
      break;
    }
    // The draft ends before its first unsure slot: later slots are rarely accepted, and every
    // verified row costs the verify pass as much as a row that is accepted.
    if (cut && SoftmaxProbAbove(p, top, params_.draft_p_min) < params_.draft_p_min) {
      verify_len_ = j;
      break;
    }
    if (params_.sampling.greedy()) {
      block_[j] = top;
    } else {
      w[params_.mask_id] = -std::numeric_limits<float>::infinity();
      auto q = sampler_.Probabilities(w);
      if (q.empty()) {  // every token but the mask token excluded: as above
        verify_len_ = j;
        break;
      }
      draft_dist_[j].assign(q.begin(), q.end());
      block_[j] = Draw(q, sampler_.Uniform());
    }
    // A drafted end of generation ends the draft before it (lossless): the verify pass's last
    // row then decides that slot as AR would (the bonus), and the rows after an accepted end
    // would never be read. Short answers end inside a draft: their last verify pass was a full
    // block of rows.
    if (IsEog(block_[j])) {
      verify_len_ = j;
      draft_end_ = gen0 + j;
      ++stats_.draft_eog_cuts;
      break;
    }
    if (c) {
      if (!c->Accept(block_[j])) {  // only when no token at all is allowed (cannot happen)
        verify_len_ = j;
        break;
      }
      ++tentative;
    }
  }
  if (c) c->Rollback(tentative);
  phase_ = Phase::kVerify;
  // Fused passes: row V - 1 guesses the token after the last verified draft, the bonus when every
  // draft is accepted.
  if (fuse_) guess_ = Guess(logits, verify_len_ - 1, gen0 + verify_len_);
}

bool Generation::EmitDraft(int32_t token, int64_t& accepted) {
  if (Emit(token)) {
    ++accepted;
    return true;
  }
  if (phase_ == Phase::kDone && finish_ != FinishReason::kStop) ++accepted;  // emitted, then ended
  return false;
}

namespace {
float ProbOf(std::span<const std::pair<int32_t, float>> dist, int32_t token) {
  for (const auto& [t, p] : dist) {
    if (t == token) return p;
  }
  return 0.0f;
}
}  // namespace

// Greedy: the AR choice of each verify row (masked at the emitted prefix, which follows the
// draft as long as drafts are accepted); accept while the draft matches it.
int32_t Generation::VerifyGreedy(std::span<const float> logits, int64_t& accepted) {
  const int64_t V = verify_len_;
  const int64_t gen0 = verify_gen0_;
  for (int64_t i = verify_row_; i < V; ++i) {
    if (i >= verify_ready_) {
      verify_row_ = i;
      return kNeedRows;
    }
    const int32_t a = Choose(logits.subspan(i * n_vocab_, n_vocab_), gen0 + i + 1);
    if (i + 1 < V && block_[i + 1] == a) {
      if (!EmitDraft(a, accepted)) return -1;
      continue;
    }
    return a;
  }
  return -1;  // not reached: the last row always yields the bonus
}

// Speculative sampling (Leviathan et al. 2023): draft d is accepted with probability
// min(1, p(d) / q(d)); the first rejection draws from norm(max(0, p - q)); all accepted: the
// bonus is drawn from p. Under a grammar p and q are the masked distributions, so an
// ungrammatical draft (p(d) = 0) ends the acceptance.
int32_t Generation::VerifySampled(std::span<const float> logits, int64_t& accepted) {
  const int64_t V = verify_len_;
  const int64_t gen0 = verify_gen0_;
  for (int64_t i = verify_row_; i < V; ++i) {
    if (i >= verify_ready_) {
      verify_row_ = i;
      return kNeedRows;
    }
    auto pd = sampler_.Probabilities(
        Processed(logits.subspan(i * n_vocab_, n_vocab_), gen0 + i + 1, constraint_.get()));
    if (pd.empty()) FailNoTokenAllowed();
    verify_dist_.assign(pd.begin(), pd.end());
    if (i + 1 == V) return Draw(verify_dist_, sampler_.Uniform());
    const int32_t d = block_[i + 1];
    const std::vector<std::pair<int32_t, float>>& q = draft_dist_[i + 1];
    const float qd = ProbOf(q, d), p = ProbOf(verify_dist_, d);
    if (qd > 0.0f && sampler_.Uniform() < std::min(1.0f, p / qd)) {
      if (!EmitDraft(d, accepted)) return -1;
      continue;
    }
    residual_.clear();
    double total = 0.0;
    for (const auto& [tok, prob] : verify_dist_) {
      const float w = std::max(0.0f, prob - ProbOf(q, tok));
      residual_.emplace_back(tok, w);
      total += w;
    }
    if (total <= 0.0) return verify_dist_.front().first;
    return Draw(residual_, sampler_.Uniform() * total);
  }
  return -1;
}

int64_t Generation::FirstVerifyChunk(int64_t V) const {
  if (V <= 1) return V;
  if (params_.verify_chunk > 0) return std::min<int64_t>(V, params_.verify_chunk);
  // auto: the chunk c minimizing the expected head cost h(c) + P(accepted >= c) h(V - c), where a
  // head call over n rows costs h(n) = 1 + kRowCost n (in units of its fixed part: the head's
  // weights are streamed once per call whatever the rows) and P comes from this generation's
  // rounds, with one prior round that accepted everything (so the first round is not chunked).
  // kRowCost: the Clover-width head (2048 -> 248,320, 2 threads, tile copies) costs ~13 ms +
  // 1.07 ms per row in Q4_0 and ~16 ms + 1.8 ms per row in Q6_K (docs/decoding.md).
  constexpr double kRowCost = 0.1;
  int64_t rounds = 1;
  for (int64_t n : verify_hist_) rounds += n;
  int64_t best = V;
  double best_cost = 1.0 + kRowCost * static_cast<double>(V);
  int64_t at_least = rounds;  // rounds that accepted >= c drafts (the prior round included)
  for (int64_t c = 1; c < V; ++c) {
    at_least -= verify_hist_[static_cast<size_t>(c - 1)];
    const double p = static_cast<double>(at_least) / static_cast<double>(rounds);
    const double cost =
        1.0 + kRowCost * static_cast<double>(c) + p * (1.0 + kRowCost * static_cast<double>(V - c));
    if (cost < best_cost) {
      best_cost = cost;
      best = c;
    }
  }
  return best;
}

void Generation::OnMoreLogits(std::span<const float> logits) {
  if (!wants_more_logits() || phase_ != Phase::kVerify) {
    Fail("generation: OnMoreLogits without a verify pass wanting more logit rows");
  }
  stats_.commit_seconds += std::chrono::duration<double>(Clock::now() - pass_start_).count();
  ++stats_.verify_more_calls;
  stats_.verify_logit_rows += verify_len_ - verify_ready_;
  verify_ready_ = verify_len_;
  wants_more_ = false;
  OnVerify(logits);
}

void Generation::OnVerify(std::span<const float> logits) {
  const int64_t V = verify_len_, tail = tail_len_;
  const int32_t guess = guess_;
  int64_t& accepted = verify_accepted_;
  const int32_t bonus =
      params_.sampling.greedy() ? VerifyGreedy(logits, accepted) : VerifySampled(logits, accepted);
  if (bonus == kNeedRows) {  // every draft of the chunk accepted: the rest of the rows, at once
    wants_more_ = true;
    pass_start_ = Clock::now();  // OnMoreLogits adds the head's time to the verify pass
    return;
  }
  if (V >= 2) ++verify_hist_[static_cast<size_t>(std::min<int64_t>(accepted, V - 1))];
  ++stats_.accepted_hist[std::min<int64_t>(accepted, params_.block_size - 1)];
  if (params_.draft_auto)
    draft_control_.OnRound(static_cast<int>(verify_len_ - 1), static_cast<int>(accepted));
  if (V > 1) state_.RollbackTo(1 + accepted);
  // A draft that ended at an end of generation: the answer likely ends about there, so the next
  // drafts stop at it (StartBlock). Only a round that lost a draft before it leaves it ahead of
  // the next seed; one that kept them all puts the seed (the bonus) on it, and no cap follows.
  end_ahead_ = V > 1 ? draft_end_ : -1;
  TimeRound();  // before the next round's draft length is chosen
  if (phase_ == Phase::kDone || bonus < 0) return;
  StartBlock(bonus);
  // The tail saw every verified draft: it stands for the next draft pass only if all were kept.
  if (tail > 0 && accepted == V - 1) UseTail(logits.subspan(V * n_vocab_), tail, guess);
}

}  // namespace crossword::decode
