// Decoding tests: the C++ decoder reproduces the PyTorch reference's golden runs (AR, diffusion
// pass by pass, spec), and self-speculative decoding is bit-identical to AR decoding.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

#include "backends/cpu/executor.h"
#include "backends/cpu/state.h"
#include "base/error.h"
#include "core/thread_pool.h"
#include "decode/generation.h"
#include "decode/test_fixture.h"
#include "model/model.h"
#include "tools/synth.h"

#ifndef CROSSWORD_SOURCE_DIR
#error "CROSSWORD_SOURCE_DIR must be defined"
#endif

namespace crossword::decode {
namespace {

using nlohmann::json;
using test_fixture::Fixture;
using test_fixture::Params;
using test_fixture::SynthTiny;

// Runs several generations in one batch per step (as the server does).
std::vector<std::vector<int32_t>> RunBatched(const Fixture& f,
                                             std::vector<std::vector<int32_t>> prompts,
                                             const std::vector<DecodeParams>& params) {
  model::ContextOptions co;
  co.max_tokens = 512;
  co.max_seqs = static_cast<int>(prompts.size());
  co.max_logit_rows = 64 * co.max_seqs;
  auto ctx_owner = f.exec->NewContext(co);
  model::ForwardContext& ctx = *ctx_owner;
  std::vector<std::unique_ptr<model::SequenceState>> states;
  std::vector<std::unique_ptr<Generation>> gens;
  for (size_t i = 0; i < prompts.size(); ++i) {
    states.push_back(f.State());
    gens.push_back(
        std::make_unique<Generation>(*f.model, *states.back(), prompts[i], params[i], nullptr));
  }
  for (;;) {
    std::vector<model::SequenceInput> ins;
    std::vector<size_t> who;
    for (size_t i = 0; i < gens.size(); ++i) {
      if (gens[i]->done()) continue;
      ins.push_back(gens[i]->NextInput());
      who.push_back(i);
    }
    if (ins.empty()) break;
    f.exec->Forward(ins, ctx);
    for (size_t j = 0; j < who.size(); ++j) DeliverLogits(*gens[who[j]], ctx, static_cast<int>(j));
  }
  std::vector<std::vector<int32_t>> out;
  for (auto& g : gens) out.push_back(g->output());
  return out;
}

std::vector<int32_t> Run1(const Fixture& f, const std::vector<int32_t>& prompt,
                          const DecodeParams& p, DecodeStats* stats = nullptr,
                          int64_t n_ctx = 1024) {
  model::ContextOptions co;
  co.max_tokens = 256;
  co.max_logit_rows = 64;
  auto ctx_owner = f.exec->NewContext(co);
  model::ForwardContext& ctx = *ctx_owner;
  auto st = f.State(n_ctx);
  Generation g(*f.model, *st, prompt, p, nullptr);
  while (!g.done()) {
    model::SequenceInput in = g.NextInput();
    f.exec->Forward({&in, 1}, ctx);
    DeliverLogits(g, ctx, 0);
  }
  if (stats) *stats = g.stats();
  return g.output();
}

json Golden() {
  std::ifstream in(std::string(CROSSWORD_SOURCE_DIR) + "/tests/golden/reference_tiny.json");
  if (!in) throw Error("tests/golden/reference_tiny.json is missing");
  return json::parse(in);
}

// Log-softmax of one logit row at a token.
double LogProb(std::span<const float> row, int32_t tok) {
  double mx = -1e30, s = 0;
  for (float v : row) mx = std::max<double>(mx, v);
  for (float v : row) s += std::exp(v - mx);
  return row[tok] - mx - std::log(s);
}

// The one range check behind the CLI, the server and Generation names the parameter its caller
// knows: a flag or a field.
TEST(CheckDecodeRanges, NamesTheParameterOutOfRange) {
  auto message = [](DecodeParams p, ParamNames names) -> std::string {
    try {
      CheckDecodeRanges(p, names);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  DecodeParams ok;
  EXPECT_EQ(message(ok, ParamNames::kFlags), "");
  DecodeParams p = ok;
  p.block_size = 1;
  EXPECT_NE(message(p, ParamNames::kFlags).find("--block-size must be in [2, 256] (got 1)"),
            std::string::npos);
  p = ok;
  p.threshold = std::nanf("");
  EXPECT_NE(message(p, ParamNames::kFields).find("threshold must be in (0, 1]"), std::string::npos);
  p = ok;
  p.draft_max = kMaxDraft + 1;
  EXPECT_NE(message(p, ParamNames::kFields).find("draft_max must be in [0, 255]"),
            std::string::npos);
  p = ok;
  p.draft_p_min = -0.5f;
  EXPECT_NE(message(p, ParamNames::kFlags).find("--draft-p-min must be in [0, 1]"),
            std::string::npos);
}

TEST(Golden, DiffusionPassesMatchTheReference) {
  const json g = Golden();
  ASSERT_EQ(
      g["model"]["synth"],
      "crossword gguf synth --preset tiny --arch clover_moe --layout official --type F32 --seed 1");
  Fixture f(SynthTiny("golden.gguf"));
  ASSERT_EQ(f.model->hparams().n_vocab, g["model"]["n_vocab"].get<int64_t>());
  const int32_t mask = g["model"]["mask_token_id"];
  const std::vector<int32_t> eog = g["model"]["eog_ids"];
  model::ContextOptions co;
  co.max_tokens = 256;
  co.max_logit_rows = 64;
  auto ctx_owner = f.exec->NewContext(co);
  model::ForwardContext& ctx = *ctx_owner;
  for (const auto& [name, run] : g["diffusion"].items()) {
    SCOPED_TRACE(name);
    DecodeParams p =
        Params(Mode::kDiffusion, run["block_size"], run["threshold"], run["max_tokens"], eog, mask);
    auto st = f.State(4096, GgmlType::kF32);  // F32 KV: compare the network, not F16 rounding
    Generation gen(*f.model, *st, run["prompt"].get<std::vector<int32_t>>(), p, nullptr);
    size_t pass = 0;
    double max_dlp = 0;
    const auto& passes = run["passes"];
    const size_t n_prompt = run["prompt"].size();
    while (!gen.done()) {
      const bool prefill = st->n_past() < static_cast<int64_t>(n_prompt);
      model::SequenceInput in = gen.NextInput();
      f.exec->Forward({&in, 1}, ctx);
      if (prefill) {  // the golden passes list starts after the prompt
        gen.OnLogits(ctx.logits(0));
        continue;
      }
      if (in.kind == model::PassKind::kDenoise) {
        ASSERT_LT(pass, passes.size());
        const json& want = passes[pass];
        ASSERT_EQ(want["kind"], "denoise") << "pass " << pass;
        const std::vector<uint8_t> before(gen.masked().begin(), gen.masked().end());
        auto logits = ctx.logits(0);
        const int64_t V = f.model->hparams().n_vocab;
        for (size_t row = 0; row < want["top"].size(); ++row) {
          // Rows whose next slot is committed get no logits (need_rows); decoding never reads
          // them. Every row the pass computed must match.
          if (!in.need_rows.empty() && !in.need_rows[row]) continue;
          for (const auto& e : want["top"][row]) {
            const double lp = LogProb(logits.subspan(row * V, V), e[0].get<int32_t>());
            max_dlp = std::max(max_dlp, std::abs(lp - e[1].get<double>()));
          }
        }
        gen.OnLogits(logits);
        json got = json::array();  // (a block cut at a committed end keeps the slots before it)
        for (size_t j = 0; j < std::min(before.size(), gen.masked().size()); ++j) {
          if (before[j] && !gen.masked()[j]) got.push_back({j, gen.block()[j]});
        }
        EXPECT_EQ(got, want["committed"]) << "pass " << pass;
      } else {
        ASSERT_LT(pass, passes.size());
        EXPECT_EQ(passes[pass]["kind"], "commit") << "pass " << pass;
        gen.OnLogits(ctx.logits(0));
      }
      ++pass;
    }
    EXPECT_EQ(pass, passes.size());
    EXPECT_EQ(gen.output(), run["tokens"].get<std::vector<int32_t>>());
    EXPECT_LT(max_dlp, 1e-4) << "max |Δ logprob| vs the float64 reference";
  }
}

TEST(Golden, ArAndSpecMatchTheReference) {
  const json g = Golden();
  Fixture f(SynthTiny("golden.gguf"));
  const int32_t mask = g["model"]["mask_token_id"];
  const std::vector<int32_t> eog = g["model"]["eog_ids"];
  for (const auto& run : g["ar"]) {
    DecodeParams p = Params(Mode::kAr, 32, 0.95f, run["max_tokens"], eog, mask);
    EXPECT_EQ(Run1(f, run["prompt"], p, nullptr, 4096), run["tokens"].get<std::vector<int32_t>>());
  }
  for (const auto& [name, run] : g["spec"].items()) {
    SCOPED_TRACE(name);
    DecodeParams p = Params(Mode::kSpec, run["block_size"], 0.95f, run["max_tokens"], eog, mask);
    DecodeStats st;
    EXPECT_EQ(Run1(f, run["prompt"], p, &st, 4096), run["tokens"].get<std::vector<int32_t>>());
    EXPECT_EQ(st.forward_passes(), run["forward_passes"].get<int64_t>());
  }
}

// Spec == AR, greedy, many prompts and lengths, EOG inside blocks; for every weight format whose
// matrix kernels differ (F32 tiles, the int8 VNNI path of Q4_0/Q8_0, the K-quant path): the
// verify pass's batched rows must reproduce the single-row AR steps bit for bit.
class SpecEqualsArTyped : public ::testing::TestWithParam<std::pair<const char*, int>> {};

TEST_P(SpecEqualsArTyped, ManyPromptsAndLengths) {
  const auto [type, n_prompts] = GetParam();
  Fixture f(SynthTiny(std::string("spec_") + type + ".gguf", 3, type));
  const int32_t mask = f.model->hparams().n_vocab - 1;
  std::mt19937 rng(7);
  int eog_hits = 0;
  int64_t cut_rows = 0;
  for (int i = 0; i < n_prompts; ++i) {
    std::vector<int32_t> prompt(3 + rng() % 40);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % 1500);
    const int64_t max_tokens = 1 + static_cast<int64_t>(rng() % 64);
    const int block = (i % 3 == 0) ? 8 : (i % 3 == 1) ? 16 : 32;
    DecodeParams ar = Params(Mode::kAr, block, 0.95f, max_tokens, {1600, 1602}, mask);
    std::vector<int32_t> want = Run1(f, prompt, ar);
    // For half the prompts one token of the AR answer also ends generation, so the answer ends
    // inside a block; AR's answer is then the prefix before its first occurrence.
    if (i % 2 == 0 && want.size() > 5) {
      const int32_t eog = want[want.size() / 2];
      ar.eog_ids.push_back(eog);
      want.resize(std::find(want.begin(), want.end(), eog) - want.begin());
      ++eog_hits;
    }
    DecodeParams sp = ar;
    sp.mode = Mode::kSpec;
    // Shorter drafts and verify cuts (random weights: top probabilities mostly ~0.001-0.05; 1.0
    // keeps no draft) only change how many drafts a round tries, never the output.
    sp.draft_max = (i % 5 == 1) ? 5 : (i % 5 == 3) ? 40 : 0;
    sp.draft_p_min = (i % 4 == 1) ? 0.002f : (i % 4 == 2) ? 0.01f : (i % 4 == 3) ? 1.0f : 0.0f;
    DecodeStats st;
    ASSERT_EQ(Run1(f, prompt, sp, &st), want)
        << type << " prompt " << i << ", max_tokens " << max_tokens << ", block " << block
        << ", draft_max " << sp.draft_max << ", draft_p_min " << sp.draft_p_min;
    const int64_t round_len = sp.draft_max > 0 ? std::min(block, sp.draft_max + 1) : block;
    ASSERT_LE(st.verify_rows, st.rounds * round_len);
    if (sp.draft_p_min == 1.0f) {
      ASSERT_EQ(st.verify_rows, st.rounds) << "a cut above every draft verifies the seed only";
    }
    if (sp.draft_p_min > 0.0f) cut_rows += st.rounds * round_len - st.verify_rows;
    // Every counted round ran its draft and verify (a block cut at its seed is not a round).
    const int64_t hist_rounds =
        std::accumulate(st.accepted_hist.begin(), st.accepted_hist.end(), int64_t{0});
    ASSERT_EQ(st.rounds, hist_rounds) << "prompt " << i;
    ASSERT_EQ(st.denoise_passes, st.rounds);
  }
  EXPECT_GT(eog_hits, n_prompts / 5);
  EXPECT_GT(cut_rows, 0) << "no verify pass was shortened";
}

INSTANTIATE_TEST_SUITE_P(Types, SpecEqualsArTyped,
                         ::testing::Values(std::pair{"Q4_0", 50}, std::pair{"F32", 20},
                                           std::pair{"Q4_K_M", 20}),
                         [](const auto& info) { return std::string(info.param.first); });

TEST(SpecEqualsAr, LongOutputsBatchedAndContextEdge) {
  Fixture f(SynthTiny("golden.gguf"));
  const int32_t mask = f.model->hparams().n_vocab - 1;
  const std::vector<int32_t> p1 = {5, 17, 300, 42, 1000}, p2 = {77, 8, 9};
  DecodeParams ar = Params(Mode::kAr, 32, 0.95f, 200, {1600, 1602}, mask);
  DecodeParams sp = ar;
  sp.mode = Mode::kSpec;
  const auto a1 = Run1(f, p1, ar), a2 = Run1(f, p2, ar);
  EXPECT_EQ(a1.size(), 200u);  // crosses many blocks
  const auto both = RunBatched(f, {p1, p2}, {sp, sp});
  EXPECT_EQ(both[0], a1);
  EXPECT_EQ(both[1], a2);
  const auto mixed = RunBatched(f, {p1, p2}, {ar, sp});
  EXPECT_EQ(mixed[0], a1);
  EXPECT_EQ(mixed[1], a2);
  // Context of 40 tokens: the answer stops at the edge in both modes.
  const auto edge_ar = Run1(f, p1, ar, nullptr, 40);
  const auto edge_sp = Run1(f, p1, sp, nullptr, 40);
  EXPECT_EQ(edge_sp, edge_ar);
  EXPECT_LE(edge_ar.size(), 36u);
}

// --draft-max auto: whatever lengths the rounds pick (0 drafts included), spec output equals AR.
TEST(SpecEqualsAr, AutoDraftLengths) {
  Fixture f(SynthTiny("spec_Q4_0.gguf", 3, "Q4_0"));
  const int32_t mask = f.model->hparams().n_vocab - 1;
  std::mt19937 rng(11);
  int64_t rounds = 0, drafts = 0;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> prompt(3 + rng() % 30);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % 1500);
    DecodeParams ar = Params(Mode::kAr, 16, 0.95f, 1 + rng() % 60, {1600, 1602}, mask);
    DecodeParams sp = ar;
    sp.mode = Mode::kSpec;
    sp.draft_auto = true;
    sp.draft_max = i % 2 ? 4 : 0;
    sp.draft_expert_budget = i % 3 == 0;        // drafts inside the seed's experts: same output
    sp.draft_skip_ffn = i % 4 == 1 ? 0b11 : 0;  // drafts without two FFN blocks: same output
    DecodeStats st;
    ASSERT_EQ(Run1(f, prompt, sp, &st), Run1(f, prompt, ar)) << "prompt " << i;
    ASSERT_LE(st.denoise_passes, st.rounds);  // a round without drafts runs no draft pass
    rounds += st.rounds;
    drafts += st.denoise_passes;
  }
  EXPECT_GT(rounds, 0);
  std::printf("auto drafts: %lld of %lld rounds drafted\n", static_cast<long long>(drafts),
              static_cast<long long>(rounds));
}

// `--draft-max auto` learns pass times only for greedy requests: a sampled request's draft
// lengths (which decide its random draws) follow its tokens, so a seed reproduces it.
TEST(SpecAuto, SampledRequestsKeepThePriorCostCurve) {
  Fixture f(SynthTiny("spec_Q4_0.gguf", 3, "Q4_0"));
  const int32_t mask = f.model->hparams().n_vocab - 1;
  std::vector<int32_t> prompt(12);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(100 + 37 * i);
  DecodeParams p = Params(Mode::kSpec, 16, 0.95f, 48, {1600, 1602}, mask);
  p.draft_auto = true;
  model::ContextOptions co;
  co.max_tokens = 256;
  co.max_logit_rows = 64;
  auto ctx = f.exec->NewContext(co);
  auto generate = [&](const DecodeParams& params) {
    auto st = f.State(1024);
    auto g = std::make_unique<Generation>(*f.model, *st, prompt, params, nullptr);
    while (!g->done()) {
      model::SequenceInput in = g->NextInput();
      f.exec->Forward({&in, 1}, *ctx);
      DeliverLogits(*g, *ctx, 0);
    }
    return std::pair{g->draft_control().RelativeCost(16), g->output()};
  };
  const double prior = 1.0 + 15 * DraftControl::kPriorSlope;
  EXPECT_NE(generate(p).first, prior);  // greedy: the measured curve
  p.sampling.temperature = 0.8f;
  p.sampling.seed = 7;
  const auto [cost, tokens] = generate(p);
  EXPECT_DOUBLE_EQ(cost, prior);
  EXPECT_EQ(generate(p).second, tokens);
}

// Fused passes (docs/decoding.md): a commit/verify pass that also runs the next block's first
// pass changes no token, and each pass it saves is one the unfused run made with the same
// result: the same output, commit/verify passes and spec acceptance (so the same drafts), and the
// denoise/draft passes fewer by exactly the tails used. Diffusion and spec, several block sizes,
// draft limits and verify cuts, both kernel paths (F32 tiles, int8 Q4_0).
TEST(FusedPasses, ChangeNoTokenAndSaveOnlyPasses) {
  for (const char* type : {"F32", "Q4_0"}) {
    Fixture f(SynthTiny(std::string("spec_") + type + ".gguf", 3, type));
    const int32_t mask = f.model->hparams().n_vocab - 1;
    std::mt19937 rng(21);
    int64_t fused = 0, hits = 0;
    for (int i = 0; i < 8; ++i) {
      std::vector<int32_t> prompt(3 + rng() % 30);
      for (auto& t : prompt) t = static_cast<int32_t>(rng() % 1500);
      const int64_t max_tokens = 1 + static_cast<int64_t>(rng() % 48);
      const int block = (i % 3 == 0) ? 4 : (i % 3 == 1) ? 8 : 16;
      for (Mode mode : {Mode::kDiffusion, Mode::kSpec}) {
        // Random weights: top probabilities ~0.001-0.05, so τ 0.02 commits several slots a pass.
        DecodeParams p = Params(mode, block, i % 2 ? 0.02f : 0.95f, max_tokens, {1600, 1602}, mask);
        if (mode == Mode::kSpec) {
          p.draft_max = i % 4 == 1 ? 3 : 0;
          p.draft_p_min = i % 4 == 2 ? 0.01f : 0.0f;
        }
        if (i % 4 == 3) {  // sampled, with penalties: the same draws in the same order
          p.sampling.temperature = 0.7f;
          p.sampling.top_k = 40;
          p.sampling.seed = 17 + static_cast<uint64_t>(i);
          p.sampling.presence_penalty = 0.9f;
          p.sampling.repetition_penalty = 1.05f;
        }
        DecodeParams q = p;
        q.fuse_passes = true;
        DecodeStats a, b;
        const auto want = Run1(f, prompt, p, &a);
        SCOPED_TRACE(std::string(type) + " prompt " + std::to_string(i) + " " +
                     std::string(ModeName(mode)));
        ASSERT_EQ(Run1(f, prompt, q, &b), want);
        EXPECT_EQ(b.commit_passes, a.commit_passes);
        EXPECT_EQ(b.denoise_passes + b.fused_hits, a.denoise_passes);
        EXPECT_EQ(b.accepted_hist, a.accepted_hist);
        EXPECT_EQ(b.verify_rows, a.verify_rows);
        EXPECT_EQ(a.fused_passes, 0);
        fused += b.fused_passes;
        hits += b.fused_hits;
      }
    }
    EXPECT_GT(fused, 0) << type;
    EXPECT_GT(hits, 0) << type << ": no tail was used, so none was compared";
    std::printf("%s: %lld fused passes, %lld tails used\n", type, static_cast<long long>(fused),
                static_cast<long long>(hits));
  }
}

// Verify in chunks (docs/decoding.md, "Fewer head rows"): a verify pass that computes its later
// logit rows only when the earlier drafts were kept (Executor::MoreLogits) changes no token, no
// draw and no acceptance; it computes fewer rows. Fixed first chunks (1, 3) and auto, greedy and
// sampled with penalties, both kernel paths, one sequence and a batch of two.
TEST(VerifyChunks, ChangeNoTokenAndComputeFewerRows) {
  for (const char* type : {"F32", "Q4_0"}) {
    Fixture f(SynthTiny(std::string("spec_") + type + ".gguf", 3, type));
    const int32_t mask = f.model->hparams().n_vocab - 1;
    std::mt19937 rng(31);
    int64_t more_calls = 0, rows_full = 0, rows_chunked = 0;
    for (int i = 0; i < 10; ++i) {
      std::vector<int32_t> prompt(3 + rng() % 30);
      for (auto& t : prompt) t = static_cast<int32_t>(rng() % 1500);
      DecodeParams p =
          Params(Mode::kSpec, i % 2 ? 8 : 16, 0.95f, 1 + rng() % 60, {1600, 1602}, mask);
      if (i % 3 == 2) {  // sampled, with penalties: the same draws in the same order
        p.sampling.temperature = 0.8f;
        p.sampling.top_k = 30;
        p.sampling.seed = 5 + static_cast<uint64_t>(i);
        p.sampling.presence_penalty = 0.5f;
      }
      DecodeStats a;
      const auto want = Run1(f, prompt, p, &a);
      EXPECT_EQ(a.verify_logit_rows, a.verify_rows);
      EXPECT_EQ(a.verify_more_calls, 0);
      for (int chunk : {1, 3, kVerifyChunkAuto}) {
        SCOPED_TRACE(std::string(type) + " prompt " + std::to_string(i) + " chunk " +
                     std::to_string(chunk));
        DecodeParams q = p;
        q.verify_chunk = chunk;
        DecodeStats b;
        ASSERT_EQ(Run1(f, prompt, q, &b), want);
        EXPECT_EQ(b.accepted_hist, a.accepted_hist);
        EXPECT_EQ(b.verify_rows, a.verify_rows);
        EXPECT_EQ(b.commit_passes, a.commit_passes);
        EXPECT_EQ(b.denoise_passes, a.denoise_passes);
        EXPECT_LE(b.verify_logit_rows, a.verify_logit_rows);
        more_calls += b.verify_more_calls;
        rows_full += a.verify_logit_rows;
        rows_chunked += b.verify_logit_rows;
      }
      if (i < 2) {  // batched beside an unchunked sequence (the server's path)
        DecodeParams q = p;
        q.verify_chunk = 1;
        const auto both = RunBatched(f, {prompt, prompt}, {q, p});
        EXPECT_EQ(both[0], want);
        EXPECT_EQ(both[1], want);
      }
    }
    EXPECT_GT(more_calls, 0) << type << ": no round asked for a second chunk";
    EXPECT_LT(rows_chunked, 3 * rows_full) << type << ": chunks computed no fewer rows";
    std::printf(
        "%s: verify logit rows %lld chunked (3 settings) against %lld x 3; %lld further "
        "chunks\n",
        type, static_cast<long long>(rows_chunked), static_cast<long long>(rows_full),
        static_cast<long long>(more_calls));
  }
}

// A server slot's next `--draft-max auto` request starts from the controller its last one ended
// with (DraftControl::Carried; draft_control_test.cc): no token changes, and only greedy spec
// generations take or offer one (a sampled request's draft lengths decide its random draws).
TEST(SpecAuto, CarriedControlChangesNoTokenAndOnlyGreedySpecTakesIt) {
  Fixture f(SynthTiny("spec_Q4_0.gguf", 3, "Q4_0"));
  const int32_t mask = f.model->hparams().n_vocab - 1;
  std::vector<int32_t> prompt(12);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(100 + 37 * i);
  model::ContextOptions co;
  co.max_tokens = 256;
  co.max_logit_rows = 64;
  auto ctx = f.exec->NewContext(co);
  DraftControl cheap;  // rows nearly free, drafts nearly always right: the longest drafts
  for (int r = 0; r < 30; ++r) {
    for (int t : {1, 2, 4, 8, 16}) cheap.OnPass(t, 1e-3 * (1.0 + 0.02 * (t - 1)));
    cheap.OnRound(10, 10);
  }
  auto generate = [&](const DecodeParams& params, const DraftControl* carried) {
    auto st = f.State(1024);
    Generation g(*f.model, *st, prompt, params, nullptr);
    if (carried) g.CarryDraftControl(*carried);
    const double acceptance = g.draft_control().acceptance();
    while (!g.done()) {
      model::SequenceInput in = g.NextInput();
      f.exec->Forward({&in, 1}, *ctx);
      DeliverLogits(g, *ctx, 0);
    }
    return std::tuple{acceptance, g.output(), g.stats().denoise_passes,
                      g.CarriedDraftControl().has_value()};
  };
  DecodeParams ar = Params(Mode::kAr, 16, 0.95f, 40, {1600, 1602}, mask);
  DecodeParams p = Params(Mode::kSpec, 16, 0.95f, 40, {1600, 1602}, mask);
  p.draft_auto = true;
  const auto [a0, fresh, drafts0, carries0] = generate(p, nullptr);
  const auto [a1, carried, drafts1, carries1] = generate(p, &cheap);
  EXPECT_DOUBLE_EQ(a0, DraftControl::kPriorAcceptance);
  EXPECT_DOUBLE_EQ(a1, cheap.acceptance());
  // Within 6 rounds a fresh control never drafts (the priors say no length pays; the first probe
  // comes after 8 rounds); the carried one drafts from the first round.
  DecodeParams p6 = p;
  p6.max_tokens = 6;
  EXPECT_EQ(std::get<2>(generate(p6, nullptr)), 0);
  EXPECT_GE(std::get<2>(generate(p6, &cheap)), 1);
  EXPECT_EQ(fresh, std::get<1>(generate(ar, nullptr)));
  EXPECT_EQ(carried, fresh);
  EXPECT_TRUE(carries0);
  EXPECT_TRUE(carries1);
  // Sampled: the carried control is ignored (a seed reproduces the request) and none is offered.
  DecodeParams sampled = p;
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.seed = 7;
  const auto [a2, out2, d2, carries2] = generate(sampled, &cheap);
  EXPECT_DOUBLE_EQ(a2, DraftControl::kPriorAcceptance);
  EXPECT_FALSE(carries2);
  EXPECT_EQ(std::get<1>(generate(sampled, nullptr)), out2);
  // Not spec: nothing is taken or offered.
  DecodeParams diffusion = Params(Mode::kDiffusion, 16, 0.95f, 40, {1600, 1602}, mask);
  diffusion.draft_auto = true;
  const auto [a3, out3, d3, carries3] = generate(diffusion, &cheap);
  EXPECT_DOUBLE_EQ(a3, DraftControl::kPriorAcceptance);
  EXPECT_FALSE(carries3);
}

TEST(Diffusion, CommittedStateEqualsArForwardOfTheSameTokens) {
  Fixture f(SynthTiny("golden.gguf"));
  const int32_t mask = f.model->hparams().n_vocab - 1;
  const std::vector<int32_t> prompt = {11, 22, 33, 44, 55, 66};
  DecodeParams p = Params(Mode::kDiffusion, 16, 0.3f, 48, {1600, 1602}, mask);
  model::ContextOptions co;
  co.max_tokens = 256;
  co.max_logit_rows = 64;
  auto ctx_owner = f.exec->NewContext(co);
  model::ForwardContext& ctx = *ctx_owner;
  auto st = f.State();
  Generation g(*f.model, *st, prompt, p, nullptr);
  while (!g.done()) {
    model::SequenceInput in = g.NextInput();
    f.exec->Forward({&in, 1}, ctx);
    g.OnLogits(ctx.logits(0));
  }
  // The state holds prompt + the committed blocks; forwarding those tokens causally from scratch
  // gives the same GDN state (denoise passes leaked nothing into it).
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), g.output().begin(), g.output().begin() + (st->n_past() - 6));
  auto ref = f.State();
  model::SequenceInput in{ref.get(), all, model::PassKind::kCausal, model::LogitRows::kNone};
  f.exec->Forward({&in, 1}, ctx);
  ASSERT_EQ(ref->n_past(), st->n_past());
  const auto& hp = f.model->hparams();
  auto& a = dynamic_cast<backends::cpu::CpuState&>(*st);  // the CPU executor's host memory
  auto& b = dynamic_cast<backends::cpu::CpuState&>(*ref);
  float d = 0;
  for (int r = 0; r < hp.n_recurrent(); ++r) {
    for (int64_t i = 0; i < a.ssm_floats(); ++i)
      d = std::max(d, std::fabs(a.ssm_state(r)[i] - b.ssm_state(r)[i]));
    for (int64_t i = 0; i < a.conv_floats(); ++i)
      d = std::max(d, std::fabs(a.conv_state(r)[i] - b.conv_state(r)[i]));
  }
  EXPECT_LT(d, 1e-4f);
}

// A greedy denoise pass scans its masked rows in runs on the host pool's threads
// (Generation::SetHostPool), each run with its own best slot. The blocks, the passes and the
// output must be those of one scan, whatever the split: pools of 2, 3 and 16 threads against
// none, at thresholds that commit many slots, few, or none (then the most confident one alone,
// so the merged best decides every pass); and with every row of a denoise pass made equal (ties
// everywhere: the lowest masked slot must win, wherever the runs put it).
TEST(Diffusion, HostPoolGivesTheSameBlocks) {
  Fixture f(SynthTiny("golden.gguf"));
  const int32_t mask = f.model->hparams().n_vocab - 1;
  const std::vector<int32_t> prompt = {11, 22, 33, 44, 55, 66};
  model::ContextOptions co;
  co.max_tokens = 256;
  co.max_logit_rows = 64;
  auto ctx = f.exec->NewContext(co);
  const int64_t V = f.model->hparams().n_vocab;
  auto run = [&](const DecodeParams& p, ThreadPool* pool, bool equal_rows) {
    auto st = f.State();
    Generation g(*f.model, *st, prompt, p, nullptr);
    g.SetHostPool(pool);
    std::vector<std::vector<uint8_t>> masks;  // the masked slots after every pass: the order
    while (!g.done()) {
      model::SequenceInput in = g.NextInput();
      f.exec->Forward({&in, 1}, *ctx);
      std::vector<float> logits(ctx->logits(0).begin(), ctx->logits(0).end());
      if (equal_rows && in.kind == model::PassKind::kDenoise) {
        for (size_t i = static_cast<size_t>(V); i < logits.size(); ++i)
          logits[i] = logits[i % static_cast<size_t>(V)];
      }
      g.OnLogits(logits);
      masks.emplace_back(g.masked().begin(), g.masked().end());
    }
    return std::tuple(g.output(), masks, g.stats().denoise_passes, g.stats().commit_passes);
  };
  ThreadPool two(2), three(3), many(16);
  for (int block : {16, 32}) {
    for (float tau : {0.001f, 0.02f, 0.3f, 1.0f}) {
      for (bool equal_rows : {false, true}) {
        const DecodeParams p = Params(Mode::kDiffusion, block, tau, 40, {}, mask);
        const auto want = run(p, nullptr, equal_rows);
        EXPECT_GT(std::get<2>(want), 0);
        for (ThreadPool* pool : {&two, &three, &many}) {
          EXPECT_EQ(run(p, pool, equal_rows), want)
              << "block " << block << " tau " << tau << " threads " << pool->size()
              << (equal_rows ? " equal rows" : "");
        }
      }
    }
  }
}

// The confidence of a greedy slot takes the row's maximum from the argmax (the kept winner or
// the excluded mask token, whichever is larger): the bits of the kernel finding it itself.
TEST(Sampling, ConfidenceOfTheArgMaxTakesItsMaximumFromIt) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-6.0f, 6.0f);
  std::vector<float> row(4099);
  for (int rep = 0; rep < 40; ++rep) {
    for (auto& v : row) v = u(rng);
    const int32_t mask = rep % 2 ? 4098 : 17;
    if (rep % 4 < 2) row[static_cast<size_t>(mask)] = 9.0f;  // the excluded entry is the max
    if (rep % 5 == 0) row[100] = row[2000] = 8.0f;           // a tie among the kept ones
    const int32_t tok = Sampler::ArgMax(row, mask);
    for (float below : {-1.0f, 0.0f, 1e-4f, 0.3f, 0.95f, 1.0f}) {
      EXPECT_EQ(std::bit_cast<uint32_t>(SoftmaxProbAboveOfArgMax(row, tok, mask, below)),
                std::bit_cast<uint32_t>(SoftmaxProbAbove(row, tok, below)))
          << "rep " << rep << " below " << below;
    }
  }
}

TEST(Sampling, RampBiasIsLinearBetweenStartAndWindow) {
  RampBias b{10.0f, 4096, 4096};
  EXPECT_EQ(b.At(0), 0.0f);
  EXPECT_EQ(b.At(4096), 0.0f);
  EXPECT_FLOAT_EQ(b.At(6144), 5.0f);
  EXPECT_FLOAT_EQ(b.At(8192), 10.0f);
  EXPECT_FLOAT_EQ(b.At(100000), 10.0f);
}

TEST(Sampling, PenaltiesFollowVllmSemantics) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  TokenHistory h;
  const int32_t prompt[] = {0};
  h.AddPrompt(prompt);
  h.AddGenerated(1);
  h.AddGenerated(1);
  std::vector<float> l = {4.0f, -4.0f, 3.0f};
  ApplyPenalties(p, h, l);
  EXPECT_FLOAT_EQ(l[0], 2.0f);                 // prompt token: repetition only
  EXPECT_FLOAT_EQ(l[1], -8.0f - 0.5f - 0.5f);  // generated twice: x2 (negative), presence, 2 x freq
  EXPECT_FLOAT_EQ(l[2], 3.0f);
}

// PenaltiesChangeNothing (the decoder then reads rows in place) holds exactly when ApplyPenalties
// leaves a row as it is: the defaults, and each penalty or bias alone, against a history.
TEST(Sampling, PenaltiesChangeNothingMatchesApplyPenalties) {
  TokenHistory h;
  const int32_t prompt[] = {0, 2};
  h.AddPrompt(prompt);
  h.AddGenerated(1);
  auto changes = [&](const SamplingParams& p) {
    std::vector<float> l = {4.0f, -4.0f, 3.0f}, before = l;
    ApplyPenalties(p, h, l);
    return l != before;
  };
  SamplingParams none;
  EXPECT_TRUE(PenaltiesChangeNothing(none));
  EXPECT_FALSE(changes(none));
  SamplingParams rep, pres, freq, bias;
  rep.repetition_penalty = 1.1f;
  pres.presence_penalty = 0.5f;
  freq.frequency_penalty = 0.5f;
  bias.logit_bias.push_back({2, 1.0f});
  for (const SamplingParams* p : {&rep, &pres, &freq, &bias}) {
    EXPECT_FALSE(PenaltiesChangeNothing(*p));
    EXPECT_TRUE(changes(*p));
  }
}

TEST(Sampling, SeededSamplingIsDeterministicAndRespectsTopK) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  p.seed = 42;
  std::vector<float> l = {1.0f, 3.0f, 2.9f, -1.0f};
  Sampler a(p, 4), b(p, 4);
  int counts[4] = {0, 0, 0, 0};
  for (int i = 0; i < 2000; ++i) {
    const int32_t x = a.Sample(l);
    ASSERT_EQ(x, b.Sample(l));
    ++counts[x];
  }
  EXPECT_EQ(counts[0] + counts[3], 0);
  EXPECT_GT(counts[1], 800);
  EXPECT_GT(counts[2], 800);
}

// Every token excluded (-inf): a request error, greedy or sampled (a sampled row used to give an
// empty candidate list, and Draw read past it); one finite token is chosen whatever the rest.
TEST(Sampling, NoFiniteLogitIsARequestError) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> none = {-inf, -inf, -inf, -inf};
  const std::vector<float> one = {-inf, -inf, 0.5f, -inf};
  for (const float temperature : {0.0f, 1.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = 2;
    p.min_p = 0.1f;
    p.top_p = 0.9f;
    Sampler s(p, 4);
    EXPECT_THROW(s.Sample(none), RequestError) << temperature;
    EXPECT_TRUE(s.Probabilities(none).empty()) << temperature;
    EXPECT_EQ(s.Sample(one), 2) << temperature;
    ASSERT_EQ(s.Probabilities(one).size(), 1u) << temperature;
  }
  EXPECT_THROW(RequireAllowed(none, 1), RequestError);
  EXPECT_NO_THROW(RequireAllowed(one, 2));
  EXPECT_THROW(Draw({}, 0.5), Error);
}

}  // namespace
}  // namespace crossword::decode

namespace crossword::decode {
namespace {

// With temperature > 0, speculative sampling must leave the output distribution equal to AR
// sampling's (Leviathan et al. 2023). Empirical check on the joint distribution of the first two
// tokens, over many seeds, with top-k keeping the support small.
TEST(SpecSampling, OutputDistributionEqualsArSampling) {
  Fixture f(SynthTiny("golden.gguf"));
  const int32_t mask = f.model->hparams().n_vocab - 1;
  const std::vector<int32_t> prompt = {17, 401, 99, 1200};
  std::map<std::pair<int32_t, int32_t>, int> ar_counts, spec_counts;
  const int n = 600;
  for (int s = 0; s < n; ++s) {
    DecodeParams p = Params(Mode::kAr, 4, 0.95f, 3, {1600, 1602}, mask);
    p.sampling.temperature = 1.0f;
    p.sampling.top_k = 3;
    p.sampling.seed = 1000 + s;
    const auto a = Run1(f, prompt, p);
    p.mode = Mode::kSpec;
    p.sampling.seed = 50000 + s;
    p.draft_p_min = (s % 2) ? 0.02f : 0.0f;  // a verify cut keeps the distribution too
    const auto b = Run1(f, prompt, p);
    ASSERT_EQ(a.size(), 3u);
    ASSERT_EQ(b.size(), 3u);
    ++ar_counts[{a[1], a[2]}];  // the two drafted tokens (the first is the seed: plain sampling)
    ++spec_counts[{b[1], b[2]}];
  }
  double tv = 0;
  std::set<std::pair<int32_t, int32_t>> keys;
  for (auto& [k, v] : ar_counts) keys.insert(k);
  for (auto& [k, v] : spec_counts) keys.insert(k);
  for (const auto& k : keys) tv += std::abs(ar_counts[k] - spec_counts[k]) / (2.0 * n);
  // Two samples of 600 from the same distribution over <= 9 outcomes: TV rarely exceeds 0.12.
  EXPECT_LT(tv, 0.12) << keys.size() << " outcomes";
  EXPECT_GT(keys.size(), 2u);
}

}  // namespace
}  // namespace crossword::decode
