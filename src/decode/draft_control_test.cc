// DraftControl (`--draft-max auto`): the draft length it picks from the cost curve and the
// acceptance it was shown, what it carries into a server slot's next request, and its cost curve's
// robustness to a few slow passes. (Generations that use it: decode_test.cc, SpecAuto.*.)
#include "decode/draft_control.h"

#include <gtest/gtest.h>

#include <vector>

namespace crossword::decode {
namespace {

// A round as Generation runs one whose seed is emitted: Plan, then Take.
int RunRound(DraftControl& c, int max_drafts) {
  const DraftControl::Choice choice = c.Plan(max_drafts);
  c.Take(choice);
  return choice.drafts;
}

// The draft-length choice follows the cost curve and the acceptance it was shown.
TEST(DraftControl, PicksTheLengthThatMaximizesTokensPerSecond) {
  const auto feed = [](DraftControl& c, double slope, double acc, int rounds) {
    for (int r = 0; r < rounds; ++r) {
      for (int t : {1, 2, 4, 8, 16}) c.OnPass(t, 1e-3 * (1.0 + slope * (t - 1)));
      const int drafted = 10;
      const int accepted = static_cast<int>(acc * drafted + 0.5);
      c.OnRound(drafted, accepted);
    }
  };
  DraftControl cheap;  // rows nearly free, drafts nearly always right: the longest draft
  feed(cheap, 0.02, 1.0, 30);
  EXPECT_GT(cheap.acceptance(), 0.9);
  EXPECT_NEAR(cheap.RelativeCost(16), 1.3, 1e-9);
  EXPECT_EQ(RunRound(cheap, 15), 15);
  EXPECT_EQ(RunRound(cheap, 3), 3);
  // The embedded model's curve (a 16-row pass ~6.5 AR steps) with 0.9 acceptance: no draft
  // length pays (best ~0.8 tokens per AR step), so rounds are AR steps, with probes after 8,
  // 16, 32, then every 64 rounds (the probes find what they found before).
  DraftControl dear;
  feed(dear, 0.37, 0.9, 30);
  EXPECT_LT(dear.Rate(4), 1.0);
  std::vector<int> probes;
  for (int r = 1; r <= 200; ++r) {
    if (RunRound(dear, 15) > 0) probes.push_back(r);
  }
  EXPECT_EQ(probes, (std::vector<int>{8, 24, 56, 120, 184}));
  // A round that drafts by choice brings the interval back to kProbeEvery.
  feed(dear, 0.02, 1.0, 30);
  EXPECT_GT(RunRound(dear, 15), 0);
  feed(dear, 0.37, 0.9, 30);
  int first = 0;
  for (int r = 1; first == 0 && r <= 100; ++r) first = RunRound(dear, 15) > 0 ? r : 0;
  EXPECT_EQ(first, DraftControl::kProbeEvery);
  // In between: a moderate curve picks a short draft.
  DraftControl mid;
  feed(mid, 0.1, 0.8, 30);
  const int d = RunRound(mid, 15);
  EXPECT_GE(d, 4);
  EXPECT_LE(d, 12);
  for (int k = 1; k <= 15; ++k) EXPECT_GE(mid.Rate(d), mid.Rate(k)) << k;
  // Unmeasured lengths follow the prior shape scaled to the measured passes.
  DraftControl fresh;
  EXPECT_NEAR(fresh.RelativeCost(11), 1.0 + 10 * DraftControl::kPriorSlope, 1e-9);
  EXPECT_EQ(RunRound(fresh, 0), 0);
}

// What a server slot carries from one `--draft-max auto` generation into the next: the pass
// costs, the probe interval and the rounds since the last probe as they stand, the acceptance with
// at most kCarriedTrials of evidence. (Which generations give and take it, and that their tokens
// do not change: decode_test.cc, SpecAuto.CarriedControlChangesNoTokenAndOnlyGreedySpecTakesIt.)
TEST(DraftControl, CarriedStateKeepsCostsAndProbesAndLightensAcceptance) {
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
  EXPECT_NEAR(c.acceptance(), dear.acceptance(), 0.05);
  // The probe interval (32 after two probes) and the rounds since the last probe (6) go on.
  DraftControl next = c;
  int first = 0;
  for (int r = 1; first == 0 && r <= 100; ++r) first = RunRound(next, 15) > 0 ? r : 0;
  EXPECT_EQ(first, 32 - 6);
  // Lighter evidence: the same rounds of full acceptance move the carried estimate further.
  DraftControl a = dear, b = c;
  for (int r = 0; r < 3; ++r) {
    a.OnRound(10, 10);
    b.OnRound(10, 10);
  }
  EXPECT_GT(b.acceptance() - c.acceptance(), a.acceptance() - dear.acceptance() + 0.02);
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
