// The trained tiny model end to end: it loads through the official-layout path, its greedy answers
// equal the golden answers the PyTorch reference wrote (tests/golden/clover_tiny_answers.json) in
// every mode, and spec decoding gives exactly the AR answer.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace crossword::engine {
namespace {

using nlohmann::json;

json Golden() {
  std::ifstream in(std::string(CROSSWORD_SOURCE_DIR) + "/tests/golden/clover_tiny_answers.json");
  EXPECT_TRUE(in.good())
      << "tests/golden/clover_tiny_answers.json missing (reference/tiny_golden.py --write)";
  return json::parse(in);
}

const Engine& TinyEngine() {
  static const std::unique_ptr<Engine> engine = [] {
    EngineOptions o;
    o.threads = 2;
    o.logger = Logger::Silent();
    return Engine::Load(o);  // no path: the embedded model
  }();
  return *engine;
}

decode::DecodeParams Params(const json& mode, int64_t max_tokens) {
  decode::DecodeParams p = TinyEngine().DefaultDecodeParams();
  p.mode = decode::ParseMode(mode["mode"].get<std::string>());
  if (mode.contains("threshold")) p.threshold = mode["threshold"].get<float>();
  p.max_tokens = max_tokens;
  p.sampling = decode::SamplingParams{};  // the reference decodes greedily without penalties
  return p;
}

std::vector<int32_t> Generate(const std::vector<int32_t>& prompt, const decode::DecodeParams& p,
                              GgmlType kv) {
  auto state = TinyEngine().NewState(static_cast<int64_t>(prompt.size()) + p.max_tokens + 8, kv);
  return RunGeneration(TinyEngine(), *state, prompt, p, nullptr).output();
}

TEST(TinyModel, EmbeddedFileLoadsThroughTheOfficialLayoutPath) {
  ASSERT_FALSE(EmbeddedModel().empty()) << "this build has no embedded models/clover-tiny.gguf";
  const Engine& e = TinyEngine();
  EXPECT_EQ(e.model().hparams().arch, "clover_moe");
  const auto& layout = e.model().layout();
  EXPECT_TRUE(layout.official()) << layout.Describe();
  EXPECT_TRUE(layout.ssm_a_raw) << "raw A_log must be converted at load";
  EXPECT_TRUE(layout.shared_count_missing);
  EXPECT_GT(layout.n_diffusion_tensors, 0);
  EXPECT_EQ(Golden()["model"]["sha256"].get<std::string>().size(), 64u);
}

// F32 KV: the reference runs in float64; an F16 cache would add its own rounding.
TEST(TinyModel, GreedyAnswersMatchTheReferenceInEveryMode) {
  const json g = Golden();
  const int64_t max_tokens = g["max_tokens"].get<int64_t>();
  int compared = 0;
  for (const json& run : g["runs"]) {
    const auto prompt = run["prompt_ids"].get<std::vector<int32_t>>();
    for (const json& mode : run["modes"]) {
      SCOPED_TRACE(run["question"].get<std::string>() + " [" + mode.dump().substr(0, 60) + "]");
      const auto want = mode["tokens"].get<std::vector<int32_t>>();
      EXPECT_EQ(Generate(prompt, Params(mode, max_tokens), GgmlType::kF32), want)
          << "reference answer: " << mode["text"].get<std::string>();
      ++compared;
    }
  }
  EXPECT_GE(compared, 16);
}

// Lossless speculation with the default F16 cache on every golden prompt at several lengths.
TEST(TinyModel, SpecEqualsArOnEveryGoldenPrompt) {
  const json g = Golden();
  for (const json& run : g["runs"]) {
    const auto prompt = run["prompt_ids"].get<std::vector<int32_t>>();
    for (int64_t n : {7, 33, 160}) {
      SCOPED_TRACE(run["question"].get<std::string>() + " max_tokens " + std::to_string(n));
      json ar = {{"mode", "ar"}}, spec = {{"mode", "spec"}};
      EXPECT_EQ(Generate(prompt, Params(spec, n), GgmlType::kF16),
                Generate(prompt, Params(ar, n), GgmlType::kF16));
    }
  }
}

}  // namespace
}  // namespace crossword::engine
