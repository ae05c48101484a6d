// Adaptive spec draft length (`--draft-max auto`, docs/decoding.md): per round, the number of
// drafts d that maximizes expected tokens per second from the acceptance seen so far (in this
// request, and on a server in the slot's earlier ones) and the pass cost curve measured so far,
// with d = 0 (no draft pass, the round is one AR step) when no draft length pays
// (../shared/parallel-decoding-notes.md section 5, Cascade).
#pragma once

#include <array>
#include <cstdint>
#include <optional>

namespace crossword::decode {

/// Picks spec draft lengths. Acceptance model: draft k of a round (k = 1, 2, ...) is accepted,
/// given that drafts 1..k-1 were, with probability p_k, the first rejection ending the round, so
/// d drafts yield E(d) = 1 + S_1 + ... + S_d tokens (the bonus included), S_k = p_1 ... p_k.
/// p_k = (accepted_k + w a) / (compared_k + w): the rounds that compared draft k and accepted it
/// (decayed kDecay per round), shrunk with weight w = kPriorWeight toward the pooled acceptance
/// a = (accepted + kPriorAcceptance w) / (compared + w) over all positions. So drafts that are
/// right or wrong as a whole (one unsure position, then all kept: the embedded model's) are
/// priced as they behave, where one a for every position (a geometric run) misprices them either
/// way (rounds that keep exactly 9 of 10 drafts: a = 0.9 promises 6.5 tokens for 9 drafts, not
/// 10; 7 rounds in 10 keep all 15, the others reject the first: a ~0.97 promises ~13, not ~11.5).
/// Cost model: a pass of T rows costs c(T) (seconds, the pass and its logits' work): the median of
/// the last kSamples passes of T rows where one was seen (of one or two, the faster), linear
/// between measured row counts, past them the prior shape 1 + slope x (T - 1) scaled to the nearest
/// measured one. A row count of 2 or more rows not timed in the last kFreshPasses passes is stale:
/// its cost is the lower of its median and the estimate from the fresh row counts alone (as above),
/// so a pass timed once in a slow moment (the first multi-row pass of a process ran 3x its later
/// median) cannot price its row count out of every later plan, which would leave it never timed
/// again; row counts between or past timed ones take those costs. The one-row cost is never
/// stale: it divides every other.
/// A round of d >= 1 drafts costs c(d + 1) twice (draft and verify), d = 0 costs c(1). The choice
/// never changes which tokens are emitted (verification decides), only how many per round.
/// Allocates nothing.
class DraftControl {
 public:
  /// Rows of a pass the cost table keeps (longer passes use the prior shape).
  static constexpr int kMaxRows = 64;
  /// Prior acceptance and its weight in drafts (pseudo-observations): of the pooled acceptance,
  /// and of each position's toward the pooled one.
  static constexpr double kPriorAcceptance = 0.6, kPriorWeight = 2.0;
  /// Prior relative cost of each extra row: (c(T) / c(1) - 1) / (T - 1), measured on the
  /// embedded model (0.37 at 16 rows; 0.26 since the pipelined row blocks, 2026-12-06) and the
  /// 4-layer real-width file (0.32 at 32 rows). Only until a pass of T rows is timed.
  static constexpr double kPriorSlope = 0.35;
  /// After this many rounds in a row without drafts, one round drafts again to re-measure (a
  /// probe). Each probe after which drafting still does not pay doubles the interval, up to
  /// kMaxProbeEvery (a probe costs two passes of the best draft length for the tokens of about
  /// one AR round when its drafts are rejected); a round that drafts by choice resets it.
  static constexpr int kProbeEvery = 8, kMaxProbeEvery = 64;
  /// Weight of older acceptance observations per new one (exponential forgetting).
  static constexpr double kDecay = 0.9;
  /// Passes per row count whose median is its cost.
  static constexpr int kSamples = 8;
  /// Passes after a row count's newest one during which its median alone is its cost (above).
  static constexpr int64_t kFreshPasses = 64;

  /// A round's draft length, as Plan chose it.
  struct Choice {
    int drafts = 0;       ///< in [0, max_drafts]
    bool probe = false;   ///< drafting although no length pays, to re-measure
    bool counts = false;  ///< max_drafts > 0: the round counts towards the probe interval
  };
  /// The next round's draft length, without counting the round.
  Choice Plan(int max_drafts) const;
  /// The round planned as `c` runs: counts it towards (or resets) the probe interval.
  void Take(const Choice& c);
  /// A pass of `rows` tokens took `seconds` (the forward pass and the work on its logits).
  void OnPass(int64_t rows, double seconds);
  /// A round with `drafted` drafts verified (the verify cut included) accepted `accepted`.
  void OnRound(int drafted, int accepted);

  /// The start of the next generation on the same slot (the server's requests in turn): the pass
  /// costs (mostly a property of the device and model; grammar-constrained generations neither
  /// give nor take them, their masks making rows dearer), the acceptance as it stands (its
  /// evidence decays kDecay per round, so it weighs about 10 rounds at most) and the rounds since
  /// the last probe; the probe interval starts again at kProbeEvery, because a new request may
  /// draft better or worse than the last ones. So a server where drafting pays drafts from the
  /// first round, and one where the pass costs rule it out does not probe (Plan).
  /// (Lightening the acceptance to 4 rounds of evidence and carrying the probe interval, as before
  /// 2026-12-07, left a slot whose last requests had rejected drafts in no-draft rounds for up to
  /// 64 rounds: whole runs of the eval's requests without a draft.)
  DraftControl Carried() const;

  /// Current pooled acceptance estimate (accepted / compared drafts over every position).
  double acceptance() const;
  /// Current estimate that draft k (1-based, <= kMaxRows) is accepted when drafts 1..k-1 were.
  double acceptance_at(int k) const;
  /// Current cost estimate of a pass of `rows` rows, relative to a 1-row pass.
  double RelativeCost(int64_t rows) const;
  /// Expected tokens per unit of 1-row pass time with d drafts (the quantity Plan maximizes).
  double Rate(int d) const;

 private:
  double Cost(int64_t rows) const;  // in seconds, or prior units before any pass was seen
  // Cost of `rows` from the timed row counts `use` accepts, each worth `value`: its own value if
  // it is one of them, else linear between the nearest ones, past them the prior shape scaled to
  // the nearest (nullopt: none of them).
  template <class Use, class Value>
  std::optional<double> CostFrom(int64_t rows, const Use& use, const Value& value) const;
  // Whether timed row count t's median is its cost (above; the one-row cost always is).
  bool Fresh(int64_t t) const;
  // The cost of timed row count t: its median, or when stale the lower of that and the estimate
  // from the fresh row counts.
  double Effective(int64_t t) const;
  // The median of row count t's recent passes (count_[t] > 0), computed when one is added.
  double MedianOfSamples(int64_t t) const;
  // p_k at pooled acceptance `pooled` (1 <= k <= kMaxRows).
  double AcceptanceAt(int k, double pooled) const;
  // Rate with d drafts that yield `tokens` expected tokens, at one-row cost c1 = Cost(1).
  double RateWith(int d, double tokens, double c1) const;
  // Per draft position k (index k, 1-based): rounds that compared draft k, and that accepted it
  // (decayed).
  std::array<double, kMaxRows + 1> compared_{}, accepted_{};
  // Per row count: the seconds of its last kSamples passes (a ring), how many there are, and
  // where the next goes.
  std::array<std::array<double, kSamples>, kMaxRows + 1> samples_{};
  std::array<uint8_t, kMaxRows + 1> count_{}, next_{};
  // Per row count: MedianOfSamples as of its newest pass.
  std::array<double, kMaxRows + 1> median_{};
  // Passes timed so far, and per row count the pass number of its newest one.
  int64_t passes_ = 0;
  std::array<int64_t, kMaxRows + 1> newest_{};
  int no_draft_rounds_ = 0;
  int probe_every_ = kProbeEvery;
};

}  // namespace crossword::decode
