// DraftControl (draft_control.h): the per-round draft length of `--draft-max auto`.
#include "decode/draft_control.h"

#include <algorithm>
#include <cmath>

namespace crossword::decode {

double DraftControl::acceptance() const {
  double accepted = 0, compared = 0;
  for (int k = 1; k <= kMaxRows; ++k) {
    accepted += accepted_[k];
    compared += compared_[k];
  }
  return (accepted + kPriorAcceptance * kPriorWeight) / (compared + kPriorWeight);
}

double DraftControl::acceptance_at(int k) const {
  if (k < 1 || k > kMaxRows) return 0.0;
  return AcceptanceAt(k, acceptance());
}

double DraftControl::AcceptanceAt(int k, double pooled) const {
  return (accepted_[k] + pooled * kPriorWeight) / (compared_[k] + kPriorWeight);
}

double DraftControl::MedianOfSamples(int64_t t) const {
  // A pass the OS interrupted (this VM's one-row passes took up to 3x their median) must not move
  // the curve, because a curve that makes drafting look cheap stops the one-row passes that would
  // correct it. Of one or two passes (no middle to trust) the faster: an interruption only ever
  // slows a pass.
  const int n = count_[t];
  if (n <= 2) return n == 1 ? samples_[t][0] : std::min(samples_[t][0], samples_[t][1]);
  std::array<double, kSamples> v{};
  std::copy_n(samples_[t].begin(), n, v.begin());
  std::nth_element(v.begin(), v.begin() + n / 2, v.begin() + n);
  const double hi = v[n / 2];
  if (n % 2) return hi;
  return 0.5 * (hi + *std::max_element(v.begin(), v.begin() + n / 2));
}

bool DraftControl::Fresh(int64_t t) const {
  // The one-row cost is every relative cost's denominator: estimated from the multi-row passes of
  // rounds that all draft, it would fall and price every draft up, so it is never stale.
  return t == 1 || passes_ - newest_[t] < kFreshPasses;
}

template <class Use, class Value>
std::optional<double> DraftControl::CostFrom(int64_t rows, const Use& use,
                                             const Value& value) const {
  const auto prior = [](int64_t t) { return 1.0 + kPriorSlope * static_cast<double>(t - 1); };
  const auto seen = [&](int64_t t) { return t >= 1 && t <= kMaxRows && count_[t] > 0 && use(t); };
  if (seen(rows)) return value(rows);
  int64_t lo = std::min<int64_t>(rows, kMaxRows + 1) - 1, hi = rows + 1;
  while (lo >= 1 && !seen(lo)) --lo;
  while (hi <= kMaxRows && !seen(hi)) ++hi;
  const bool has_lo = lo >= 1, has_hi = hi <= kMaxRows;
  if (has_lo && has_hi) {  // linear between the measured neighbours
    const double f = static_cast<double>(rows - lo) / static_cast<double>(hi - lo);
    return value(lo) + f * (value(hi) - value(lo));
  }
  // Past the measured rows: the prior shape, scaled to the nearest measured pass.
  if (has_lo) return value(lo) * prior(rows) / prior(lo);
  if (has_hi) return value(hi) * prior(rows) / prior(hi);
  return std::nullopt;
}

double DraftControl::Effective(int64_t t) const {
  const double m = median_[t];
  if (Fresh(t)) return m;
  const std::optional<double> from_fresh = CostFrom(
      t, [this](int64_t u) { return Fresh(u); }, [this](int64_t u) { return median_[u]; });
  return from_fresh ? std::min(m, *from_fresh) : m;
}

double DraftControl::Cost(int64_t rows) const {
  const std::optional<double> c = CostFrom(
      rows, [](int64_t) { return true; }, [this](int64_t u) { return Effective(u); });
  return c ? *c : 1.0 + kPriorSlope * static_cast<double>(rows - 1);
}

double DraftControl::RelativeCost(int64_t rows) const { return Cost(rows) / Cost(1); }

double DraftControl::Rate(int d) const {
  const double pooled = acceptance();
  double tokens = 1.0, survive = 1.0;
  for (int k = 1; k <= std::min(d, kMaxRows); ++k) {
    survive *= AcceptanceAt(k, pooled);
    tokens += survive;
  }
  return RateWith(d, tokens, Cost(1));
}

double DraftControl::RateWith(int d, double tokens, double c1) const {
  if (d <= 0) return 1.0;
  return tokens / (2.0 * Cost(d + 1) / c1);
}

DraftControl::Choice DraftControl::Plan(int max_drafts) const {
  if (max_drafts <= 0) return {};
  // The pooled acceptance and the one-row cost once per plan; E(d) grows with d.
  const double pooled = acceptance(), c1 = Cost(1);
  int best = 0;
  double best_rate = RateWith(0, 1.0, c1);
  int best_drafting = 1;  // the best length with drafts, for probes
  double best_drafting_rate = -1;
  bool could_pay = false;  // some length pays if every draft is right
  double tokens = 1.0, survive = 1.0;
  for (int d = 1; d <= std::min(max_drafts, kMaxRows); ++d) {
    survive *= AcceptanceAt(d, pooled);
    tokens += survive;
    // RateWith's round cost, once for both rates: the expected one and the one if every draft
    // is right.
    const double round_cost = 2.0 * Cost(d + 1) / c1;
    const double r = tokens / round_cost;
    could_pay = could_pay || (d + 1.0) / round_cost > 1.0;
    if (r > best_drafting_rate) {
      best_drafting_rate = r;
      best_drafting = d;
    }
    if (r > best_rate) {
      best_rate = r;
      best = d;
    }
  }
  if (best > 0) return {.drafts = best, .probe = false, .counts = true};
  // A probe drafts the longest length while no pass of its rows was timed: a cost curve and
  // acceptances known only for short drafts (the priors' choice) could never show that long ones
  // pay, as they do where a long pass costs little more than a short one. Otherwise it re-measures
  // the acceptance with the best length, which is worth it only where drafts that are all right
  // would pay: where the pass costs alone rule drafting out, it would cost two passes for nothing.
  if (no_draft_rounds_ + 1 >= probe_every_) {
    const int longest = std::min(max_drafts, kMaxRows - 1);
    if (count_[longest + 1] == 0) return {.drafts = longest, .probe = true, .counts = true};
    if (could_pay) return {.drafts = best_drafting, .probe = true, .counts = true};
  }
  return {.drafts = 0, .probe = false, .counts = true};
}

void DraftControl::Take(const Choice& c) {
  if (!c.counts) return;
  if (c.drafts == 0) {
    ++no_draft_rounds_;
    return;
  }
  probe_every_ = c.probe ? std::min(2 * probe_every_, kMaxProbeEvery) : kProbeEvery;
  no_draft_rounds_ = 0;
}

void DraftControl::OnPass(int64_t rows, double seconds) {
  if (rows < 1 || rows > kMaxRows || !(seconds >= 0)) return;
  samples_[rows][next_[rows]] = seconds;
  newest_[rows] = ++passes_;
  next_[rows] = static_cast<uint8_t>((next_[rows] + 1) % kSamples);
  count_[rows] = static_cast<uint8_t>(std::min(count_[rows] + 1, kSamples));
  median_[rows] = MedianOfSamples(rows);
}

DraftControl DraftControl::Carried() const {
  DraftControl c = *this;
  c.probe_every_ = kProbeEvery;
  return c;
}

void DraftControl::OnRound(int drafted, int accepted) {
  if (drafted <= 0) return;
  drafted = std::min(drafted, kMaxRows);
  accepted = std::clamp(accepted, 0, drafted);
  for (int k = 1; k <= kMaxRows; ++k) {
    compared_[k] *= kDecay;
    accepted_[k] *= kDecay;
  }
  // Drafts 1..accepted were compared and kept; draft accepted + 1 (if any) compared and rejected.
  for (int k = 1; k <= std::min(accepted + 1, drafted); ++k) {
    compared_[k] += 1.0;
    if (k <= accepted) accepted_[k] += 1.0;
  }
}

}  // namespace crossword::decode
