// Decoding rules checked with fabricated logits on the synth model (the passes run for real, so
// the state stays consistent; only the rows the generation reads are made up): where a diffusion
// block ends, and where a spec draft stops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/error.h"
#include "decode/generation.h"
#include "decode/test_fixture.h"
#include "model/forward.h"

namespace crossword::decode {
namespace {

using test_fixture::Fixture;
using test_fixture::Params;
using test_fixture::SynthTiny;

// The synth model, a forward context of one sequence, and the generation under test (set by the
// fixtures below) with its last pass input.
struct FakeBase {
  Fixture f{SynthTiny("golden.gguf")};
  int64_t V = f.model->hparams().n_vocab;
  int32_t mask = static_cast<int32_t>(V - 1);
  std::unique_ptr<model::ForwardContext> ctx;
  std::unique_ptr<model::SequenceState> st = f.State();
  std::unique_ptr<Generation> g;
  model::SequenceInput in;
  FakeBase() {
    model::ContextOptions co;
    co.max_tokens = 256;
    co.max_logit_rows = 64;
    ctx = f.exec->NewContext(co);
  }
};

// A diffusion generation on the synth model whose denoise passes get fabricated logits: the
// prefill runs for real (it commits the prompt), its row makes `word` the seed, and each Pass
// delivers rows where row r predicts slot r + 1, its token's logit `rows[r].second` above 0
// everywhere else (1-3: below any threshold, larger ones surer; 50: certain).
struct FakeDenoise : FakeBase {
  static constexpr int32_t kEog = 7, kWord = 5;
  explicit FakeDenoise(int block) {
    g = std::make_unique<Generation>(*f.model, *st, std::vector<int32_t>{11, 22, 33},
                                     Params(Mode::kDiffusion, block, 0.9f, 40, {kEog}, mask),
                                     nullptr);
    in = g->NextInput();
    f.exec->Forward({&in, 1}, *ctx);
    std::vector<float> seed_row(static_cast<size_t>(V), 0.0f);
    seed_row[kWord] = 50.0f;
    g->OnLogits(seed_row);
  }
  void Pass(const std::vector<std::pair<int32_t, float>>& rows) {
    in = g->NextInput();
    ASSERT_EQ(in.kind, model::PassKind::kDenoise);
    ASSERT_EQ(in.tokens.size(), rows.size());
    std::vector<float> logits(rows.size() * static_cast<size_t>(V), 0.0f);
    for (size_t r = 0; r < rows.size(); ++r) logits[r * V + rows[r].first] = rows[r].second;
    g->OnLogits(logits);
  }
  std::vector<uint8_t> masked() const { return {g->masked().begin(), g->masked().end()}; }
  std::vector<int32_t> block() const { return {g->block().begin(), g->block().end()}; }
  std::vector<uint8_t> need() const { return {in.need_rows.begin(), in.need_rows.end()}; }
};

// A block ends at its first committed end of generation: the answer ends there or before (no
// committed slot changes), so the slots after it are dropped, even those committed in the same
// pass, and the later passes run over the block up to the end only, their fallback committing a
// slot of the answer each (docs/decoding.md, block diffusion step 2).
TEST(Diffusion, ABlockEndsAtItsFirstCommittedEnd) {
  FakeDenoise d(8);
  const int32_t w = FakeDenoise::kWord, eog = FakeDenoise::kEog;
  // Pass 1 (8 rows): slot 3 becomes the end, slot 5 is certain too, the rest unsure.
  d.Pass({{w, 1}, {w, 2}, {eog, 50}, {w, 1}, {w, 50}, {w, 1}, {w, 1}, {w, 1}});
  EXPECT_EQ(d.masked(), (std::vector<uint8_t>{0, 1, 1, 0}));
  EXPECT_EQ(d.block(), (std::vector<int32_t>{w, d.mask, d.mask, eog}));
  // Pass 2 (4 rows; rows asked for slots 1 and 2 only): neither reaches the threshold, so the
  // fallback commits the surer one, slot 2.
  d.Pass({{w, 2}, {w + 1, 3}, {w, 1}, {w, 1}});
  EXPECT_EQ(d.need(), (std::vector<uint8_t>{1, 1, 0, 0}));
  EXPECT_EQ(d.masked(), (std::vector<uint8_t>{0, 1, 0, 0}));
  // Pass 3: slot 1 by the fallback; the answer ends at the end token.
  d.Pass({{w + 3, 1}, {w, 1}, {w, 1}, {w, 1}});
  EXPECT_EQ(d.need(), (std::vector<uint8_t>{1, 0, 0, 0}));
  EXPECT_TRUE(d.g->done());
  EXPECT_EQ(d.g->output(), (std::vector<int32_t>{w, w + 3, w + 1}));
  EXPECT_EQ(d.g->stats().denoise_passes, 3);
}

// The cut is made after every pass: an end committed before the one that cut the block cuts it
// again, with the committed slots after it (slot 3 here), and the next pass has the shorter block.
TEST(Diffusion, AnEarlierCommittedEndCutsTheBlockAgain) {
  FakeDenoise d(8);
  const int32_t w = FakeDenoise::kWord, eog = FakeDenoise::kEog;
  d.Pass({{w, 1}, {w, 1}, {w, 50}, {eog, 50}, {w, 1}, {w, 1}, {w, 1}, {w, 1}});
  EXPECT_EQ(d.block(), (std::vector<int32_t>{w, d.mask, d.mask, w, eog}));
  d.Pass({{w, 1}, {eog, 50}, {w, 1}, {w, 1}, {w, 1}});  // slot 2: an earlier end
  EXPECT_EQ(d.block(), (std::vector<int32_t>{w, d.mask, eog}));
  d.Pass({{w + 1, 1}, {w, 1}, {w, 1}});  // 3 rows; the fallback commits slot 1
  EXPECT_EQ(d.need(), (std::vector<uint8_t>{1, 0, 0}));
  EXPECT_TRUE(d.g->done());
  EXPECT_EQ(d.g->output(), (std::vector<int32_t>{w, w + 1}));
  EXPECT_EQ(d.g->stats().denoise_passes, 3);
}

// A greedy spec generation (draft_max 8) on the synth model whose passes run for real (the state
// stays consistent through verify's rollback) but get fabricated logits: the prefill's row makes
// `kWord` the seed; row r of a draft predicts slot r + 1, row r of a verify the token after
// slot r.
struct FakeSpec : FakeBase {
  static constexpr int32_t kEog = 7, kWord = 40;  // kWord + 12 stays clear of the end token
  // temperature 0: greedy; above: sampled with seed 1 (the fabricated rows are sure enough that
  // the draws follow them).
  explicit FakeSpec(float temperature = 0.0f, uint64_t skip_ffn = 0) {
    DecodeParams p = Params(Mode::kSpec, 9, 0.9f, 40, {kEog}, mask);
    p.draft_max = 8;
    p.draft_skip_ffn = skip_ffn;
    p.sampling.temperature = temperature;
    p.sampling.seed = 1;
    g = std::make_unique<Generation>(*f.model, *st, std::vector<int32_t>{11, 22, 33}, p, nullptr);
    Pass({kWord});
  }
  // Runs the next pass and delivers rows predicting `tokens` (one row each; rows past them
  // predict kWord).
  void Pass(const std::vector<int32_t>& tokens) {
    in = g->NextInput();
    f.exec->Forward({&in, 1}, *ctx);
    const size_t rows = std::max(in.tokens.size(), tokens.size());
    std::vector<float> logits(rows * static_cast<size_t>(V), 0.0f);
    for (size_t r = 0; r < rows; ++r) logits[r * V + (r < tokens.size() ? tokens[r] : kWord)] = 50;
    g->OnLogits(logits);
  }
};

// After a round that rejected a draft before a drafted end of generation, the next draft stops
// at that end: the answer likely ends there, and drafts past it would be rows for nothing
// (docs/decoding.md, "Drafts up to the drafted end"). Lossless: verification decides every token.
TEST(SpecDrafts, StopAtTheEndARejectedRoundDrafted) {
  FakeSpec s;
  const int32_t w = FakeSpec::kWord, eog = FakeSpec::kEog;
  EXPECT_EQ(s.g->NextInput().tokens.size(), 9u) << "the first draft: the seed and 8 masks";
  // Draft: slots 1-5 words, slot 6 the end; the verify pass takes the seed and the 5 words.
  s.Pass({w + 1, w + 2, w + 3, w + 4, w + 5, eog});
  EXPECT_EQ(s.in.tokens.size(), 9u);
  // Verify: slots 1 and 2 kept, slot 3 rejected (the bonus w + 9 at answer index 3).
  s.Pass({w + 1, w + 2, w + 9});
  EXPECT_EQ(s.in.tokens.size(), 6u);
  // The next draft runs to the drafted end at answer index 6: the seed and 3 masks, not 8.
  const model::SequenceInput next = s.g->NextInput();
  EXPECT_EQ(next.tokens.size(), 4u);
  s.Pass({w + 10, w + 11, eog});
  // All kept up to that end: the answer ends there.
  s.Pass({w + 10, w + 11, eog});
  EXPECT_TRUE(s.g->done());
  EXPECT_EQ(s.g->output(), (std::vector<int32_t>{w, w + 1, w + 2, w + 9, w + 10, w + 11}));
}

// A round whose draft had no end, or which kept every draft before its end, leaves no cap: the
// next draft has its full length.
TEST(SpecDrafts, KeepTheirLengthWithoutARejectedDraftedEnd) {
  const int32_t w = FakeSpec::kWord, eog = FakeSpec::kEog;
  {
    FakeSpec s;
    s.Pass({w + 1, w + 2, w + 3, w + 4, w + 5, w + 6, w + 7, w + 8});  // no end drafted
    s.Pass({w + 1, w + 2, w + 9});                                     // slot 3 rejected
    EXPECT_EQ(s.g->NextInput().tokens.size(), 9u);
  }
  {
    FakeSpec s;
    s.Pass({w + 1, w + 2, w + 3, eog});    // the end drafted at slot 4
    s.Pass({w + 1, w + 2, w + 3, w + 9});  // all 3 drafts kept; the answer goes on
    EXPECT_FALSE(s.g->done());
    EXPECT_EQ(s.g->NextInput().tokens.size(), 9u);
  }
}

// Sampled spec keeps its draft lengths: they decide which random draws it makes, so a capped
// draft would change a seeded request's answer against the releases before the cap.
TEST(SpecDrafts, SampledDraftsAreNotCapped) {
  FakeSpec s(1.0f);
  const int32_t w = FakeSpec::kWord, eog = FakeSpec::kEog;
  s.Pass({w + 1, w + 2, w + 3, w + 4, w + 5, eog});
  EXPECT_EQ(s.in.tokens.size(), 9u);
  s.Pass({w + 1, w + 2, w + 9});
  EXPECT_EQ(s.in.tokens.size(), 6u);
  ASSERT_EQ(s.g->output(), (std::vector<int32_t>{w, w + 1, w + 2, w + 9}));
  EXPECT_EQ(s.g->NextInput().tokens.size(), 9u);
}

// draft_skip_ffn: draft passes skip those layers' FFN blocks, verify passes never (they decide
// the output); a layer the model cannot skip is refused when the generation starts.
TEST(SpecDrafts, OnlyDraftPassesSkipFfnBlocks) {
  FakeSpec s(0.0f, 0b110);
  const int32_t w = FakeSpec::kWord;
  s.Pass({w + 1, w + 2, w + 3});
  EXPECT_EQ(s.in.kind, model::PassKind::kDenoise);
  EXPECT_EQ(s.in.skip_ffn_layers, 0b110u);
  s.Pass({w + 1, w + 2, w + 9});
  EXPECT_EQ(s.in.kind, model::PassKind::kCausal);
  EXPECT_EQ(s.in.skip_ffn_layers, 0u);
  s.Pass({w + 4});
  EXPECT_EQ(s.in.skip_ffn_layers, 0b110u);
  const int n_layer = s.f.model->hparams().n_layer;
  DecodeParams p = Params(Mode::kSpec, 9, 0.9f, 40, {FakeSpec::kEog}, s.mask);
  p.draft_skip_ffn = uint64_t{1} << (n_layer - 1);
  auto st = s.f.State();
  EXPECT_THROW(Generation(*s.f.model, *st, {11, 22, 33}, p, nullptr), Error);
  p.draft_skip_ffn = uint64_t{1} << (n_layer - 2);
  EXPECT_NO_THROW(Generation(*s.f.model, *st, {11, 22, 33}, p, nullptr));
}

}  // namespace
}  // namespace crossword::decode
