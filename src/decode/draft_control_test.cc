// DraftControl (`--draft-max auto`): the draft length it picks from the cost curve and the
// acceptance it was shown, what it carries into a server slot's next request, and its cost curve's
// robustness to a few slow passes. (Generations that use it: decode_test.cc, SpecAuto.*.)
#include "decode/draft_control.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace crossword::decode {
namespace {

// A round as Generation runs one whose seed is emitted: Plan, then Take.
int RunRound(DraftControl& c, int max_drafts) {
  const DraftControl::Choice choice = c.Plan(max_drafts);
  c.Take(choice);
  return choice.drafts;
}

// Rounds of 10 drafts whose accepted counts cycle through `accepted`, on a cost curve of the given
// slope (a T-row pass costs 1 + slope (T - 1) one-row passes).
void Feed(DraftControl& c, double slope, const std::vector<int>& accepted, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    for (int t : {1, 2, 4, 8, 16}) c.OnPass(t, 1e-3 * (1.0 + slope * (t - 1)));
    c.OnRound(10, accepted[static_cast<size_t>(r) % accepted.size()]);
  }
}
// Accepted counts of drafts right with probability ~0.6 each, one after the other (a geometric
// run: 4 of 10 rounds reject the first draft, 2 the second, ...).
const std::vector<int> kGeometric = {0, 0, 0, 0, 1, 1, 2, 2, 3, 5};

// The draft-length choice follows the cost curve and the acceptance it was shown.
TEST(DraftControl, PicksTheLengthThatMaximizesTokensPerSecond) {
  DraftControl cheap;  // rows nearly free, drafts always right: the longest draft
  Feed(cheap, 0.02, {10}, 30);
  EXPECT_GT(cheap.acceptance(), 0.9);
  EXPECT_NEAR(cheap.RelativeCost(16), 1.3, 1e-9);
  EXPECT_EQ(RunRound(cheap, 15), 15);
  EXPECT_EQ(RunRound(cheap, 3), 3);
  // The embedded model's curve of an early stop (a 16-row pass ~6.5 AR steps) with drafts right
  // ~0.6 of the time in a row: no draft length pays, so rounds are AR steps, with probes after
  // 8, 16, 32, then every 64 rounds (the probes find what they found before).
  DraftControl dear;
  Feed(dear, 0.37, kGeometric, 30);
  for (int d = 1; d <= 15; ++d) EXPECT_LT(dear.Rate(d), 1.0) << d;
  std::vector<int> probes;
  for (int r = 1; r <= 200; ++r) {
    if (RunRound(dear, 15) > 0) probes.push_back(r);
  }
  EXPECT_EQ(probes, (std::vector<int>{8, 24, 56, 120, 184}));
  // A round that drafts by choice brings the interval back to kProbeEvery.
  Feed(dear, 0.02, {10}, 30);
  EXPECT_GT(RunRound(dear, 15), 0);
  Feed(dear, 0.37, kGeometric, 30);
  int first = 0;
  for (int r = 1; first == 0 && r <= 100; ++r) first = RunRound(dear, 15) > 0 ? r : 0;
  EXPECT_EQ(first, DraftControl::kProbeEvery);
  // In between: a moderate curve and drafts that hold for 6 positions pick about 6 (the seventh
  // is always rejected: drafting it costs a row for nothing).
  DraftControl mid;
  Feed(mid, 0.1, {6}, 30);
  const int d = RunRound(mid, 15);
  EXPECT_EQ(d, 6);
  for (int k = 1; k <= 15; ++k) EXPECT_GE(mid.Rate(d), mid.Rate(k)) << k;
  // Unmeasured lengths follow the prior shape scaled to the measured passes.
  DraftControl fresh;
  EXPECT_NEAR(fresh.RelativeCost(11), 1.0 + 10 * DraftControl::kPriorSlope, 1e-9);
  EXPECT_EQ(RunRound(fresh, 0), 0);
}

// Drafts that are right or wrong as a whole (the embedded model's: a round rejects its first
// draft or keeps all of them) are priced per position: 15 drafts yield ~1 + 0.7 x 15 tokens when
// 7 rounds of 10 keep all of them, where one pooled acceptance for every position (0.97: most
// compared drafts are kept) would promise ~11-13, and 2 drafts 1 + 0.7 + 0.7, not ~2.9.
TEST(DraftControl, PricesDraftsThatHoldAsAWhole) {
  DraftControl whole;
  for (int r = 0; r < 40; ++r) {
    for (int t : {1, 2, 3, 4, 8, 16}) whole.OnPass(t, 1e-3 * (1.0 + 0.25 * (t - 1)));
    whole.OnRound(15, r % 10 < 7 ? 15 : 0);  // the last three rounds reject: p_1 below 0.7
  }
  const auto tokens = [&](int d) { return whole.Rate(d) * 2.0 * whole.RelativeCost(d + 1); };
  EXPECT_NEAR(whole.acceptance_at(1), 0.65, 0.05);
  EXPECT_GT(whole.acceptance_at(2), 0.97);
  const double a = whole.acceptance();
  EXPECT_GT(a, 0.94);
  // Positions 2..15 shrink a little toward the pooled estimate: S_15 ~0.65 x 0.99^14.
  EXPECT_NEAR(tokens(15), 1.0 + 0.65 * 14, 0.6);
  EXPECT_LT(tokens(15), (1.0 - std::pow(a, 16)) / (1.0 - a) - 1.0);
  EXPECT_NEAR(tokens(2), 1.0 + 0.65 * 2, 0.1);
  // A 16-row pass at 4.75 one-row passes: 15 drafts pay, 2 do not.
  EXPECT_GT(whole.Rate(15), 1.0);
  EXPECT_LT(whole.Rate(2), 1.0);
  EXPECT_EQ(RunRound(whole, 15), 15);
}

// A probe drafts the longest length while no pass of its rows was timed (the priors alone pick a
// short one). When the passes timed rule drafting out even with every draft right, no probe
// follows: it would cost two passes for nothing. Once those times go stale (kFreshPasses one-row
// passes later) the long pass is priced from the fresh ones again, drafting could pay, and the
// probes come back with the best length.
TEST(DraftControl, AProbeTriesTheLongestDraftUntilItsPassIsTimed) {
  DraftControl c;
  for (int t : {1, 2}) c.OnPass(t, 1e-3 * (1.0 + 0.35 * (t - 1)));
  for (int r = 1; r < DraftControl::kProbeEvery; ++r) EXPECT_EQ(RunRound(c, 15), 0);
  const DraftControl::Choice probe = c.Plan(15);
  EXPECT_TRUE(probe.probe);
  EXPECT_EQ(probe.drafts, 15);
  EXPECT_EQ(c.Plan(7).drafts, 7);  // the longest the round allows
  c.Take(probe);
  c.OnPass(16, 1e-3 * 9.0);  // dear: no length pays even if every draft is right
  c.OnRound(15, 1);
  for (int d = 1; d <= 15; ++d) EXPECT_LT(c.Rate(d), 1.0) << d;
  for (int r = 1; r <= 100; ++r) EXPECT_EQ(RunRound(c, 15), 0) << "round " << r;
  for (int i = 0; i < DraftControl::kFreshPasses; ++i) c.OnPass(1, 1e-3);
  const DraftControl::Choice next = c.Plan(15);
  EXPECT_TRUE(next.probe);
  EXPECT_GT(next.drafts, 0);
  EXPECT_LT(next.drafts, 15);
}

// What a server slot carries from one `--draft-max auto` generation into the next: the pass
// costs, the acceptance and the rounds since the last probe as they stand; the probe interval
// starts again at kProbeEvery. (Which generations give and take it, and that their tokens do not
// change: decode_test.cc, SpecAuto.CarriedControlChangesNoTokenAndOnlyGreedySpecTakesIt.)
TEST(DraftControl, CarriedStateKeepsCostsAndAcceptanceAndRestartsProbes) {
  DraftControl dear;  // the embedded model's curve, drafts rejected: probes after 8, 16, 32
  for (int r = 0; r < 30; ++r) {
    for (int t : {1, 2, 4, 8, 16}) dear.OnPass(t, 1e-3 * (1.0 + 0.37 * (t - 1)));
    dear.OnRound(10, 1);
  }
  std::vector<int> probes;
  for (int r = 1; r <= 30; ++r) {
    if (RunRound(dear, 15) > 0) probes.push_back(r);
  }
  ASSERT_EQ(probes, (std::vector<int>{8, 24}));
  const DraftControl c = dear.Carried();
  EXPECT_DOUBLE_EQ(c.RelativeCost(16), dear.RelativeCost(16));
  EXPECT_DOUBLE_EQ(c.acceptance(), dear.acceptance());
  for (int k = 1; k <= 15; ++k) EXPECT_DOUBLE_EQ(c.acceptance_at(k), dear.acceptance_at(k)) << k;
  const auto first_probe = [](DraftControl x) {
    for (int r = 1; r <= 100; ++r) {
      if (RunRound(x, 15) > 0) return r;
    }
    return 0;
  };
  // The rounds since the last probe (6) go on; the interval is 8 in the next generation and
  // stays 32 in this one.
  EXPECT_EQ(first_probe(c), DraftControl::kProbeEvery - 6);
  EXPECT_EQ(first_probe(dear), 32 - 6);
}

// A pass's cost is the median of its row count's last kSamples passes: a few interrupted passes
// (this VM's one-row passes took up to 3x their median) leave the curve alone, a lasting change
// moves it.
TEST(DraftControl, AFewSlowPassesDoNotMoveTheCostCurve) {
  DraftControl c;
  for (int r = 0; r < 8; ++r) {
    for (int t : {1, 2, 4}) c.OnPass(t, 1e-3 * (1.0 + 0.4 * (t - 1)));
  }
  const double before = c.RelativeCost(4);
  EXPECT_NEAR(before, 2.2, 1e-9);
  for (int r = 0; r < 3; ++r) c.OnPass(1, 3e-3);
  EXPECT_DOUBLE_EQ(c.RelativeCost(4), before);
  for (int r = 0; r < 2; ++r) c.OnPass(1, 3e-3);  // 5 of the last 8: the median follows
  EXPECT_NEAR(c.RelativeCost(4), 2.2 / 3.0, 1e-9);
}

// A row count timed once in a slow moment (the process's first 16-row pass took ~3x its later
// median) and never chosen since: once it is stale (kFreshPasses passes after its newest) its
// cost is estimated from the fresh row counts, so the long draft is chosen and timed again. With
// the stale median alone it stays too dear for any plan and is never timed again.
TEST(DraftControl, AStaleSlowPassDoesNotPriceItsRowCountOutForGood) {
  const auto shape = [](int t) { return 1e-3 * (1.0 + 0.25 * (t - 1)); };
  DraftControl c;
  c.OnPass(16, 3.0 * shape(16));  // the slow probe
  for (int r = 0; r < 8; ++r) {
    for (int t : {1, 8}) c.OnPass(t, shape(t));
    c.OnRound(7, 7);  // every draft right
  }
  EXPECT_NEAR(c.RelativeCost(16), 3.0 * 4.75, 1e-9) << "fresh: the median, however slow";
  EXPECT_EQ(c.Plan(15).drafts, 7);
  // Rounds of 7 drafts, all right, until the slow pass is kFreshPasses passes old.
  int rounds = 1;
  for (; rounds < 100 && RunRound(c, 15) == 7; ++rounds) {
    for (int t : {1, 8}) c.OnPass(t, shape(t));
    c.OnRound(7, 7);
  }
  EXPECT_LT(rounds, 100) << "the 16-row pass was never chosen again";
  // Stale now: the prior shape scaled to the fresh 8-row passes, lower than the slow pass.
  const double prior =
      (1.0 + DraftControl::kPriorSlope * 15) / (1.0 + DraftControl::kPriorSlope * 7);
  EXPECT_NEAR(c.RelativeCost(16), 2.75 * prior, 1e-9);
  EXPECT_EQ(c.Plan(15).drafts, 15);
  // Timed again at its real cost, the 16-row pass is fresh and measured as it is.
  c.OnPass(16, shape(16));
  c.OnPass(16, shape(16));
  EXPECT_NEAR(c.RelativeCost(16), 4.75, 1e-9);
}

// The one-row cost is never stale: in rounds that all draft no one-row pass is timed, and an
// estimate from the multi-row passes (the prior shape) would lower it and price every draft up.
TEST(DraftControl, TheOneRowCostDoesNotGoStale) {
  DraftControl c;
  for (int r = 0; r < 8; ++r) c.OnPass(1, 1e-3);
  for (int r = 0; r < 2 * DraftControl::kFreshPasses; ++r) c.OnPass(5, 1.6e-3);
  EXPECT_NEAR(c.RelativeCost(5), 1.6, 1e-9);
}

// A row count never timed lies between the costs of its timed neighbours, stale or not (each at
// its own cost), not at the prior shape scaled from the fresh ones alone.
TEST(DraftControl, AnUntimedRowCountLiesBetweenItsStaleNeighbours) {
  DraftControl c;
  c.OnPass(9, 2.0e-3);
  c.OnPass(11, 2.2e-3);
  for (int r = 0; r < 2 * DraftControl::kFreshPasses; ++r) c.OnPass(1, 1e-3);
  EXPECT_NEAR(c.RelativeCost(9), 2.0, 1e-9);
  EXPECT_NEAR(c.RelativeCost(10), 2.1, 1e-9);
  EXPECT_NEAR(c.RelativeCost(11), 2.2, 1e-9);
}

// The median with fewer passes than the ring holds, and of an even count whose middle values
// differ: {1, 3, 5} -> 3, {1, 3, 5, 7} -> 4; of one or two passes the faster ({3, 1} -> 1), so
// one interrupted pass among the first ones does not make its row count look dear or cheap.
TEST(DraftControl, TheCostIsTheMedianOfThePassesSeen) {
  DraftControl c;
  c.OnPass(1, 3.0);  // an interrupted first one-row pass
  c.OnPass(2, 3.0);
  EXPECT_DOUBLE_EQ(c.RelativeCost(2), 1.0);
  c.OnPass(1, 1.0);
  EXPECT_DOUBLE_EQ(c.RelativeCost(2), 3.0) << "the faster of two";
  c.OnPass(2, 1.0);
  EXPECT_DOUBLE_EQ(c.RelativeCost(2), 1.0);
  c.OnPass(2, 5.0);
  EXPECT_DOUBLE_EQ(c.RelativeCost(2), 3.0);
  c.OnPass(2, 7.0);
  EXPECT_DOUBLE_EQ(c.RelativeCost(2), 4.0);
  for (int i = 0; i < 6; ++i) c.OnPass(2, 9.0);  // the ring wraps: the last 8 are 5, 7, 9 x 6
  EXPECT_DOUBLE_EQ(c.RelativeCost(2), 9.0);
}

// Plan has no effect; only a round that runs (Take) counts towards the probe interval, so a
// round planned but never run (the seed ended the answer) leaves a carried controller as it was.
TEST(DraftControl, OnlyARoundThatRunsCountsTowardsTheProbe) {
  DraftControl c;  // priors: no length pays, the first probe after 8 rounds
  for (int r = 1; r < DraftControl::kProbeEvery; ++r) EXPECT_EQ(RunRound(c, 15), 0);
  const DraftControl::Choice probe = c.Plan(15);
  EXPECT_TRUE(probe.probe);
  EXPECT_GT(probe.drafts, 0);
  EXPECT_EQ(c.Plan(15).drafts, probe.drafts);  // planned again: the same
  c.Take(probe);
  int next = 0;
  for (int r = 1; next == 0 && r <= 100; ++r) next = RunRound(c, 15) > 0 ? r : 0;
  EXPECT_EQ(next, 2 * DraftControl::kProbeEvery);
  EXPECT_EQ(DraftControl().Plan(0).drafts, 0);
  EXPECT_FALSE(DraftControl().Plan(0).counts);
}

}  // namespace
}  // namespace crossword::decode
