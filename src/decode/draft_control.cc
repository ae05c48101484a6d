// DraftControl (draft_control.h): the per-round draft length of `--draft-max auto`.
#include "decode/draft_control.h"

#include <algorithm>
#include <cmath>

namespace crossword::decode {

double DraftControl::acceptance() const {
  return (hits_ + kPriorAcceptance * kPriorWeight) / (trials_ + kPriorWeight);
}

double DraftControl::Cost(int64_t rows) const {
  const auto prior = [](int64_t t) { return 1.0 + kPriorSlope * static_cast<double>(t - 1); };
  const auto seen = [this](int64_t t) { return t >= 1 && t <= kMaxRows && n_[t] > 0; };
  const auto mean = [this](int64_t t) { return sum_[t] / n_[t]; };
  if (seen(rows)) return mean(rows);
  int64_t lo = std::min<int64_t>(rows, kMaxRows + 1) - 1, hi = rows + 1;
  while (lo >= 1 && !seen(lo)) --lo;
  while (hi <= kMaxRows && !seen(hi)) ++hi;
  const bool has_lo = lo >= 1, has_hi = hi <= kMaxRows;
  if (has_lo && has_hi) {  // linear between the measured neighbours
    const double f = static_cast<double>(rows - lo) / static_cast<double>(hi - lo);
    return mean(lo) + f * (mean(hi) - mean(lo));
  }
  // Past the measured rows: the prior shape, scaled to the nearest measured pass.
  if (has_lo) return mean(lo) * prior(rows) / prior(lo);
  if (has_hi) return mean(hi) * prior(rows) / prior(hi);
  return prior(rows);
}

double DraftControl::RelativeCost(int64_t rows) const { return Cost(rows) / Cost(1); }

double DraftControl::Rate(int d) const {
  if (d <= 0) return 1.0;
  const double a = std::clamp(acceptance(), 0.0, 0.999);
  const double tokens = (1.0 - std::pow(a, d + 1)) / (1.0 - a);
  return tokens / (2.0 * RelativeCost(d + 1));
}

int DraftControl::Next(int max_drafts) {
  if (max_drafts <= 0) return 0;
  int best = 0;
  double best_rate = Rate(0);
  int best_drafting = 1;  // the best length with drafts, for probes
  double best_drafting_rate = -1;
  for (int d = 1; d <= max_drafts; ++d) {
    const double r = Rate(d);
    if (r > best_drafting_rate) {
      best_drafting_rate = r;
      best_drafting = d;
    }
    if (r > best_rate) {
      best_rate = r;
      best = d;
    }
  }
  if (best > 0) {
    probe_every_ = kProbeEvery;
  } else if (++no_draft_rounds_ >= probe_every_) {
    best = best_drafting;
    probe_every_ = std::min(2 * probe_every_, kMaxProbeEvery);
  }
  if (best > 0) no_draft_rounds_ = 0;
  return best;
}

void DraftControl::OnPass(int64_t rows, double seconds) {
  if (rows < 1 || rows > kMaxRows || !(seconds >= 0)) return;
  for (int t = 1; t <= kMaxRows; ++t) {
    sum_[t] *= kDecay;
    n_[t] *= kDecay;
  }
  sum_[rows] += seconds;
  n_[rows] += 1.0;
}

void DraftControl::OnRound(int drafted, int accepted) {
  if (drafted <= 0) return;
  hits_ = hits_ * kDecay + accepted;
  trials_ = trials_ * kDecay + accepted + (accepted < drafted ? 1 : 0);
}

}  // namespace crossword::decode
