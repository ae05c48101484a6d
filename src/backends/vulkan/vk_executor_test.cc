// The Vulkan executor end to end on synthesized tiny models (clover_moe official layout and
// qwen35moe upstream layout; Q8_0, Q4_0, the Q4_K_M mix, F16) against the CPU engine
// (model::Model::Forward): logits of every prompt row, greedy tokens over 64 steps, chunked
// prefill == token by token, denoise passes leaving no trace, replay rollback, snapshots, and
// the out-of-memory message. Under the validation layer with synchronization validation.
//
// Tolerance of the logits (docs/gpu.md, "Executor tests"): both engines quantize activations
// to int8 the same way and sum in different orders, so they part where a float rounding moves
// an activation across a quantization boundary: one int8 step is 1/127 of its block's largest
// value, and after such a flip everything downstream differs by about that relative amount.
// F16 KV rows flip by one f16 ulp (2^-11) the same way. So the NMSE of a row is bounded by
// (1/127)^2 for int8 paths and (2^-11)^2 for float weights, with each row's argmax equal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "backends/cpu/executor.h"
#include "backends/vulkan/executor.h"
#include "backends/vulkan/test_util.h"
#include "base/error.h"
#include "tools/synth.h"

namespace crossword::vulkan {
namespace {

using model::LogitRows;
using model::PassKind;

struct ModelCase {
  const char* arch;
  const char* layout;
  const char* type;
  bool int8;  // some matrices take the int8 path (quantized weights)
};

const ModelCase kCases[] = {{"clover_moe", "official", "Q8_0", true},
                            {"qwen35moe", "upstream", "Q4_0", true},
                            {"clover_moe", "official", "Q4_K_M", true},
                            {"qwen35moe", "upstream", "F16", false}};

std::string CaseName(const ModelCase& c) {
  return std::string(c.arch) + "_" + c.layout + "_" + c.type;
}

std::string SynthPath(const ModelCase& c) {
  return tools::SynthesizeOnce({.preset = "tiny",
                                .type = c.type,
                                .layout = c.layout,
                                .arch = c.arch,
                                .seed = 7,
                                .output = ::testing::TempDir() + "/vkexec_" + CaseName(c) + ".gguf",
                                .threads = 2});
}

double RowNmse(std::span<const float> got, std::span<const float> want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return den > 0 ? num / den : num;
}

int Argmax(std::span<const float> row) {
  return static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
}

std::vector<int32_t> Tokens(int n, int seed, int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

// Both engines on one model file: the CPU executor (the reference) and the Vulkan one.
struct Pair {
  std::shared_ptr<const model::Model> model;
  std::unique_ptr<model::Executor> cpu;
  std::unique_ptr<VulkanExecutor> gpu;
  std::unique_ptr<model::ForwardContext> cctx, gctx;

  Pair(Device& dev, const std::string& path, int64_t max_tokens = 16) {
    model::LoadOptions lo;
    lo.logger = Logger::Silent();
    model = model::Model::Load(path, lo);
    cpu = std::make_unique<backends::cpu::CpuExecutor>(
        model,
        backends::cpu::CpuOptions{.threads = 2, .repack = false, .logger = Logger::Silent()});
    ExecutorOptions eo;
    eo.max_tokens = max_tokens;
    eo.max_logit_rows = max_tokens;
    gpu = std::make_unique<VulkanExecutor>(dev, model, eo);
    model::ContextOptions c;
    c.max_tokens = 64;
    c.max_logit_rows = 64;
    cctx = cpu->NewContext(c);
    gctx = gpu->NewContext(c);
  }
  model::StateOptions Opts(int64_t n_ctx = 160, int64_t record = 0) const {
    model::StateOptions so;
    so.n_ctx = n_ctx;
    so.max_record_tokens = record;
    return so;
  }
  static std::vector<float> Run(const model::Executor& e, model::ForwardContext& ctx,
                                model::SequenceState& st, std::span<const int32_t> toks,
                                LogitRows rows, PassKind kind, bool record) {
    model::SequenceInput in{&st, toks, kind, rows, record};
    e.Forward({&in, 1}, ctx);
    auto l = ctx.logits(0);
    return {l.begin(), l.end()};
  }
  std::vector<float> Cpu(model::SequenceState& st, std::span<const int32_t> toks,
                         LogitRows rows = LogitRows::kAll, PassKind kind = PassKind::kCausal,
                         bool record = false) {
    return Run(*cpu, *cctx, st, toks, rows, kind, record);
  }
  std::vector<float> Gpu(model::SequenceState& st, std::span<const int32_t> toks,
                         LogitRows rows = LogitRows::kAll, PassKind kind = PassKind::kCausal,
                         bool record = false) {
    return Run(*gpu, *gctx, st, toks, rows, kind, record);
  }
  int64_t V() const { return model->hparams().n_vocab; }
  // A CPU and a GPU state that have both run `prompt`.
  struct States {
    std::unique_ptr<model::SequenceState> cpu, gpu;
  };
  States AfterPrompt(std::span<const int32_t> prompt) {
    States s{cpu->NewState(Opts()), gpu->NewState(Opts())};
    Cpu(*s.cpu, prompt);
    Gpu(*s.gpu, prompt);
    return s;
  }
};

std::vector<float> Gdn(const model::SequenceState& st) {
  return static_cast<const DeviceState&>(st).ReadGdnState();
}

// Compares logits rows (n_vocab each): NMSE per row within `bound`, argmax equal.
void ExpectRowsClose(const std::vector<float>& got, const std::vector<float>& want, int64_t V,
                     double bound, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t r = 0; r * V < want.size(); ++r) {
    std::span<const float> g(got.data() + r * V, V), w(want.data() + r * V, V);
    const double e = RowNmse(g, w);
    worst = std::max(worst, e);
    EXPECT_LE(e, bound) << what << ": row " << r;
    EXPECT_EQ(Argmax(g), Argmax(w)) << what << ": row " << r;
  }
  std::fprintf(stderr, "  %s: worst row NMSE %.3g (bound %.3g)\n", what.c_str(), worst, bound);
}

double Bound(const ModelCase& c) { return c.int8 ? 1.0 / (127.0 * 127.0) : std::ldexp(1.0, -22); }

using VulkanExecutorTest = testing::VkTest;

TEST_F(VulkanExecutorTest, PromptLogitsMatchTheCpuEngine) {
  for (const ModelCase& c : kCases) {
    SCOPED_TRACE(CaseName(c));
    Pair p(dev(), SynthPath(c));
    auto cs = p.cpu->NewState(p.Opts());
    auto gs = p.gpu->NewState(p.Opts());
    const std::vector<int32_t> prompt = Tokens(13, 3, p.V());
    ExpectRowsClose(p.Gpu(*gs, prompt), p.Cpu(*cs, prompt), p.V(), Bound(c), CaseName(c));
    // Then single tokens on top (decode attention over the cache, GDN from the stored state).
    for (int i = 0; i < 3; ++i) {
      const int32_t t = prompt[static_cast<size_t>(i)];
      ExpectRowsClose(p.Gpu(*gs, {&t, 1}), p.Cpu(*cs, {&t, 1}), p.V(), Bound(c),
                      CaseName(c) + " step");
    }
    EXPECT_EQ(gs->n_past(), cs->n_past());
  }
}

TEST_F(VulkanExecutorTest, GreedyTokensEqualTheCpuEngineOver64Tokens) {
  for (const ModelCase& c : {kCases[2], kCases[3]}) {
    SCOPED_TRACE(CaseName(c));
    Pair p(dev(), SynthPath(c));
    auto cs = p.cpu->NewState(p.Opts());
    auto gs = p.gpu->NewState(p.Opts());
    const std::vector<int32_t> prompt = Tokens(9, 11, p.V());
    std::vector<float> lc = p.Cpu(*cs, prompt, LogitRows::kLast);
    std::vector<float> lg = p.Gpu(*gs, prompt, LogitRows::kLast);
    std::vector<int32_t> tc, tg;
    for (int i = 0; i < 64; ++i) {
      tc.push_back(Argmax(lc));
      tg.push_back(Argmax(lg));
      lc = p.Cpu(*cs, {&tc.back(), 1}, LogitRows::kLast);
      lg = p.Gpu(*gs, {&tg.back(), 1}, LogitRows::kLast);
    }
    EXPECT_EQ(tg, tc);
    std::fprintf(stderr,
                 "  %s: GPU tokens after 64 steps, %d distinct; the last logits' NMSE %.3g\n",
                 CaseName(c).c_str(),
                 static_cast<int>(std::set<int32_t>(tg.begin(), tg.end()).size()), RowNmse(lg, lc));
  }
}

// A prompt in chunks of the pass size gives the same logits and state as token by token.
TEST_F(VulkanExecutorTest, ChunkedPrefillEqualsTokenByToken) {
  const ModelCase& c = kCases[0];
  Pair p(dev(), SynthPath(c), /*max_tokens=*/8);
  auto a = p.gpu->NewState(p.Opts());
  auto b = p.gpu->NewState(p.Opts());
  // Chunks of 8, 8, 1 (pass sizes whose pipelines the other tests compile too: lavapipe
  // compiles each specialization at its first dispatch).
  const std::vector<int32_t> prompt = Tokens(17, 5, p.V());
  const std::vector<float> all = p.Gpu(*a, prompt, LogitRows::kAll);
  ASSERT_EQ(all.size(), prompt.size() * p.V());
  std::vector<float> one;
  for (int32_t t : prompt) {
    const std::vector<float> l = p.Gpu(*b, {&t, 1}, LogitRows::kLast);
    one.insert(one.end(), l.begin(), l.end());
  }
  ExpectRowsClose(all, one, p.V(), Bound(c), "chunked vs one by one");
  const std::vector<float> sa = Gdn(*a), sb = Gdn(*b);
  EXPECT_LE(testing::Nmse(sa, sb), Bound(c)) << "GDN state";
  EXPECT_EQ(a->n_past(), 17);
  EXPECT_EQ(b->n_past(), 17);
}

// Denoise passes: bidirectional block over the prefix, nothing committed; as the CPU engine.
TEST_F(VulkanExecutorTest, DenoisePassMatchesTheCpuAndLeavesNoTrace) {
  const ModelCase& c = kCases[1];
  Pair p(dev(), SynthPath(c));
  const std::vector<int32_t> prompt = Tokens(10, 8, p.V()), block = Tokens(8, 9, p.V());
  auto [cs, gs] = p.AfterPrompt(prompt);
  const std::vector<float> before = Gdn(*gs);
  ExpectRowsClose(p.Gpu(*gs, block, LogitRows::kAll, PassKind::kDenoise),
                  p.Cpu(*cs, block, LogitRows::kAll, PassKind::kDenoise), p.V(), Bound(c),
                  "denoise block");
  EXPECT_EQ(gs->n_past(), 10);
  EXPECT_EQ(Gdn(*gs), before) << "a denoise pass changed the committed GDN state";
  const int32_t t = block[0];
  ExpectRowsClose(p.Gpu(*gs, {&t, 1}), p.Cpu(*cs, {&t, 1}), p.V(), Bound(c), "after denoise");
}

// Draft passes that skip FFN blocks (SequenceInput::skip_ffn_layers): as the CPU engine's, and
// not the full pass.
TEST_F(VulkanExecutorTest, DenoisePassSkippingFfnBlocksMatchesTheCpu) {
  // F16: no int8 activations, whose rounding can flip a near-tie in a router (on the Q4_0 case
  // one row of one skipping block came out at NMSE 0.036, and blocks that skip nothing reach
  // 1.3x this test's int8 bound on other tokens).
  const ModelCase& c = kCases[3];
  Pair p(dev(), SynthPath(c));
  const std::vector<int32_t> prompt = Tokens(10, 8, p.V()), block = Tokens(8, 9, p.V());
  auto [cs, gs] = p.AfterPrompt(prompt);
  auto run = [&](const model::Executor& e, model::ForwardContext& ctx, model::SequenceState& st,
                 uint64_t skip) {
    model::SequenceInput in{&st, block, PassKind::kDenoise, LogitRows::kAll};
    in.skip_ffn_layers = skip;
    e.Forward({&in, 1}, ctx);
    auto l = ctx.logits(0);
    return std::vector<float>(l.begin(), l.end());
  };
  const uint64_t skip = 0b101;  // layers 0 and 2: a skipped first layer and one after a kept one
  const std::vector<float> gpu = run(*p.gpu, *p.gctx, *gs, skip);
  ExpectRowsClose(gpu, run(*p.cpu, *p.cctx, *cs, skip), p.V(), Bound(c), "skipping 0 and 2");
  EXPECT_GT(RowNmse(gpu, run(*p.cpu, *p.cctx, *cs, 0)), 10 * Bound(c))
      << "the skip changed nothing";
}

// A recorded pass rolled back to a prefix equals having run only that prefix (GPU replay),
// and the CPU engine's rollback.
TEST_F(VulkanExecutorTest, RollbackReplaysTheKeptPrefix) {
  const ModelCase& c = kCases[2];
  Pair p(dev(), SynthPath(c));
  auto gs = p.gpu->NewState(p.Opts(160, 8));
  auto ref = p.gpu->NewState(p.Opts(160, 8));
  auto cs = p.cpu->NewState(p.Opts(160, 8));
  const std::vector<int32_t> prompt = Tokens(9, 1, p.V()), draft = Tokens(8, 2, p.V());
  p.Gpu(*gs, prompt);
  p.Gpu(*ref, prompt);
  p.Cpu(*cs, prompt);
  p.Gpu(*gs, draft, LogitRows::kAll, PassKind::kCausal, /*record=*/true);
  p.Cpu(*cs, draft, LogitRows::kAll, PassKind::kCausal, true);
  EXPECT_EQ(gs->recorded_tokens(), 8);
  gs->RollbackTo(3);
  cs->RollbackTo(3);
  for (int i = 0; i < 3; ++i) p.Gpu(*ref, std::span(draft).subspan(i, 1));
  EXPECT_EQ(gs->n_past(), 12);
  EXPECT_LE(testing::Nmse(Gdn(*gs), Gdn(*ref)), 1e-10)
      << "replayed state vs the prefix run on the GPU";
  const int32_t t = draft[5];
  const std::vector<float> g = p.Gpu(*gs, {&t, 1});
  ExpectRowsClose(g, p.Gpu(*ref, {&t, 1}), p.V(), Bound(c), "rolled back vs prefix only");
  ExpectRowsClose(g, p.Cpu(*cs, {&t, 1}), p.V(), Bound(c), "rolled back vs the CPU");
  EXPECT_THROW(gs->RollbackTo(1), Error);  // nothing recorded any more
}

TEST_F(VulkanExecutorTest, SnapshotRestoreAndResetRewindTheSequence) {
  const ModelCase& c = kCases[0];
  Pair p(dev(), SynthPath(c));
  auto gs = p.gpu->NewState(p.Opts());
  const std::vector<int32_t> a = Tokens(9, 4, p.V()), b = Tokens(8, 6, p.V());
  p.Gpu(*gs, a);
  model::StateSnapshot snap;
  gs->SaveSnapshot(snap);
  const std::vector<float> first = p.Gpu(*gs, b);
  EXPECT_TRUE(gs->CanRestore(snap));
  gs->Restore(snap);
  EXPECT_EQ(gs->n_past(), 9);
  EXPECT_EQ(p.Gpu(*gs, b), first) << "replay after Restore differs";
  gs->Reset();
  EXPECT_EQ(gs->n_past(), 0);
  EXPECT_FALSE(gs->CanRestore(snap));
  const std::vector<float> zero = Gdn(*gs);
  EXPECT_TRUE(std::all_of(zero.begin(), zero.end(), [](float v) { return v == 0.0f; }));
}

TEST_F(VulkanExecutorTest, BadInputsFailBeforeTouchingTheState) {
  const ModelCase& c = kCases[0];
  Pair p(dev(), SynthPath(c));
  auto gs = p.gpu->NewState(p.Opts(16));
  const std::vector<int32_t> bad = {1, static_cast<int32_t>(p.V())};
  EXPECT_THROW(p.Gpu(*gs, bad), Error);
  const std::vector<int32_t> long_prompt = Tokens(17, 1, p.V());
  EXPECT_THROW(p.Gpu(*gs, long_prompt), Error);
  EXPECT_THROW(p.Gpu(*gs, Tokens(3, 1, p.V()), LogitRows::kAll, PassKind::kCausal, true), Error);
  EXPECT_EQ(gs->n_past(), 0);
  model::StateOptions f32 = p.Opts();
  f32.kv_type = GgmlType::kF32;
  EXPECT_THROW(p.gpu->NewState(f32), Error);
}

TEST_F(VulkanExecutorTest, AModelThatDoesNotFitSaysWhatItNeedsAndWhichFlagHelps) {
  const ModelCase& c = kCases[0];
  model::LoadOptions lo;
  lo.logger = Logger::Silent();
  std::shared_ptr<const model::Model> m = model::Model::Load(SynthPath(c), lo);
  ExecutorOptions eo;
  const DeviceFootprint f = VulkanExecutor::Footprint(*m, eo);
  EXPECT_GT(f.weights, 0u);
  eo.memory_limit = f.total() / 2;
  try {
    VulkanExecutor e(dev(), m, eo);
    ADD_FAILURE() << "no error for a model twice the memory limit";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("needs"), std::string::npos) << msg;
    EXPECT_NE(msg.find("-ngl"), std::string::npos) << msg;
    EXPECT_NE(msg.find(dev().info().name), std::string::npos) << msg;
  }
}

// The trained tiny model (models/clover-tiny.gguf, the one crossword embeds) answers the
// golden prompts in AR mode on the GPU with exactly the CPU engine's committed greedy tokens
// (tests/golden/clover_tiny_engine_answers.json: F16 KV, no penalties).
TEST_F(VulkanExecutorTest, TinyModelAnswersTheGoldenPromptsAsTheCpuEngine) {
  // CROSSWORD_SOURCE_DIR in the environment: the tree when the binary runs elsewhere (a GPU
  // machine that received the build, bench/gpu_check.sh).
  const char* env_root = std::getenv("CROSSWORD_SOURCE_DIR");
  const std::string root = env_root != nullptr ? env_root : CROSSWORD_SOURCE_DIR;
  auto read = [&root](const std::string& name) {
    std::ifstream in(root + "/" + name);
    EXPECT_TRUE(in.good()) << name;
    return nlohmann::json::parse(in);
  };
  const nlohmann::json g = read("tests/golden/clover_tiny_answers.json");
  const nlohmann::json want = read("tests/golden/clover_tiny_engine_answers.json");
  model::LoadOptions lo;
  lo.logger = Logger::Silent();
  std::shared_ptr<const model::Model> m = model::Model::Load(root + "/models/clover-tiny.gguf", lo);
  ExecutorOptions eo;
  VulkanExecutor gpu(dev(), m, eo);
  model::ContextOptions co;
  co.max_tokens = 256;
  std::unique_ptr<model::ForwardContext> ctx = gpu.NewContext(co);
  size_t i = 0;
  int compared = 0;
  for (const nlohmann::json& run : g["runs"]) {
    const auto prompt = run["prompt_ids"].get<std::vector<int32_t>>();
    for (const nlohmann::json& mode : run["modes"]) {
      const nlohmann::json& w = want["runs"][i++];
      if (mode["mode"].get<std::string>() != "ar") continue;
      SCOPED_TRACE(run["question"].get<std::string>());
      const auto tokens = w["tokens"].get<std::vector<int32_t>>();
      model::StateOptions so;
      so.n_ctx = static_cast<int64_t>(prompt.size() + tokens.size()) + 8;
      auto st = gpu.NewState(so);
      std::vector<int32_t> got;
      model::SequenceInput in{st.get(), prompt, PassKind::kCausal, LogitRows::kLast};
      gpu.Forward({&in, 1}, *ctx);
      while (got.size() < tokens.size()) {
        got.push_back(Argmax(ctx->logits(0)));
        model::SequenceInput step{st.get(), {&got.back(), 1}, PassKind::kCausal, LogitRows::kLast};
        gpu.Forward({&step, 1}, *ctx);
      }
      EXPECT_EQ(got, tokens) << "golden: " << w["text"];
      ++compared;
    }
  }
  EXPECT_GE(compared, 8);
}

}  // namespace
}  // namespace crossword::vulkan
