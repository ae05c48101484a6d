// Independent proof that synthesized files are real GGUF: llama.cpp (the library that the npm
// package node-llama-cpp@3.21.1 ships, driven by tests/oracles/llama_oracle.mjs) loads
// `synth --preset tiny --arch qwen35moe --layout upstream` files of every tensor type and
// generates varied greedy text, the quantized files decode to nearly the F32 model's
// distributions, and a patched official-layout file runs too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "base/log.h"
#include "tools/patch.h"
#include "tools/synth.h"

namespace crossword::tools {
namespace {

using nlohmann::json;

std::string Synth(const std::string& type, const std::string& layout) {
  SynthOptions o;
  o.preset = "tiny";
  o.arch = "qwen35moe";
  o.layout = layout;
  o.type = type;
  o.seed = 3;
  o.output = ::testing::TempDir() + "/llama_" + type + "_" + layout + ".gguf";
  Synthesize(o, Logger::Silent());
  return o.output;
}

// Runs the harness; returns its JSON document (fails the test on a non-zero exit). One thread:
// ctest runs tests in parallel, and llama.cpp's spinning workers crawl on an oversubscribed CPU.
json RunOracle(const std::string& model, const std::string& tokens, int generate, int top) {
  const std::string cmd =
      "node '" CROSSWORD_SOURCE_DIR
      "/tests/oracles/llama_oracle.mjs' --oracles '" CROSSWORD_ORACLE_DIR "' --model '" +
      model + "' --tokens " + tokens + " --generate " + std::to_string(generate) + " --top " +
      std::to_string(top) + " --threads 1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  std::string out;
  char buf[65536];
  size_t n;
  while (p && (n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = p ? ::pclose(p) : -1;
  EXPECT_EQ(status, 0) << cmd << "\n" << out;
  if (status != 0) return json();
  return json::parse(out);
}

// <|im_start|> then ordinary tokens, <|im_end|>, a newline byte, <|im_start|> (tiny ids).
constexpr const char* kPrompt = "1601,300,400,500,600,1602,198,1601";
constexpr int kPromptLen = 8;

void CheckWellFormed(const json& j, const std::string& what, int top) {
  ASSERT_EQ(j["prompt_top"].size(), static_cast<size_t>(kPromptLen)) << what;
  std::set<int> top1;
  for (const auto& pos : j["prompt_top"]) {
    ASSERT_EQ(pos.size(), static_cast<size_t>(top)) << what;
    double prev = 0;
    for (const auto& e : pos) {
      ASSERT_FALSE(e[1].is_null()) << what;
      const double lp = e[1].get<double>();
      EXPECT_TRUE(std::isfinite(lp) && lp <= 1e-9 && lp <= prev + 1e-9) << what;
      prev = lp;
    }
    top1.insert(pos[0][0].get<int>());
  }
  EXPECT_GE(top1.size(), 3u) << what << ": prompt positions should predict different tokens";
  const auto& gen = j["generated"];
  ASSERT_EQ(gen.size(), 16u) << what;
  std::set<int> distinct;
  for (size_t k = 0; k < gen.size(); ++k) {
    distinct.insert(gen[k].get<int>());
    EXPECT_EQ(gen[k], j["generated_top"][k][0][0]) << what << ": greedy picks the top token";
  }
  EXPECT_GE(distinct.size(), 4u) << what << ": greedy output should vary, got " << gen.dump();
  EXPECT_EQ(j["generated_top"][0], j["prompt_top"][kPromptLen - 1]) << what;
}

TEST(LlamaOracle, SynthesizedFilesLoadAndGenerateInLlamaCpp) {
  const int top = 20;
  const std::string f32 = Synth("F32", "upstream");
  const json ref = RunOracle(f32, kPrompt, 16, top);
  std::remove(f32.c_str());
  ASSERT_FALSE(ref.is_null());
  CheckWellFormed(ref, "F32", top);
  // Mean |logprob difference| over F32's top-5 tokens at every prompt position: a wrong block
  // layout would give unrelated distributions (differences of several nats).
  const std::map<std::string, double> bound = {
      {"F16", 0.02}, {"BF16", 0.08}, {"Q8_0", 0.3}, {"Q4_K_M", 1.2}, {"Q4_0", 1.5}};
  for (const auto& [type, max_mean] : bound) {
    const std::string path = Synth(type, "upstream");
    const json j = RunOracle(path, kPrompt, 16, top);
    std::remove(path.c_str());
    ASSERT_FALSE(j.is_null()) << type;
    CheckWellFormed(j, type, top);
    double sum = 0;
    int count = 0;
    for (int pos = 0; pos < kPromptLen; ++pos) {
      std::map<int, double> theirs;
      for (const auto& e : j["prompt_top"][pos]) theirs[e[0].get<int>()] = e[1].get<double>();
      for (int k = 0; k < 5; ++k) {
        const int id = ref["prompt_top"][pos][k][0].get<int>();
        const double lp = ref["prompt_top"][pos][k][1].get<double>();
        // A token missing from the other top-20 is at least as far off as the 20th entry.
        const double other =
            theirs.contains(id) ? theirs[id] : j["prompt_top"][pos][top - 1][1].get<double>();
        sum += std::fabs(other - lp);
        ++count;
      }
    }
    EXPECT_LT(sum / count, max_mean) << type << " vs F32";
    std::printf("%-6s mean |dlogprob| vs F32 over top-5: %.4f\n", type.c_str(), sum / count);
  }
}

TEST(LlamaOracle, PatchedOfficialFileRunsLikeTheUpstreamOne) {
  const std::string official = Synth("Q4_0", "official");
  const std::string patched = ::testing::TempDir() + "/llama_patched.gguf";
  PatchToUpstream({official, patched, false}, Logger::Silent());
  const std::string upstream = Synth("Q4_0", "upstream");
  const json a = RunOracle(patched, kPrompt, 16, 5);
  const json b = RunOracle(upstream, kPrompt, 16, 5);
  for (const std::string& f : {official, patched, upstream}) std::remove(f.c_str());
  ASSERT_FALSE(a.is_null());
  CheckWellFormed(a, "patched", 5);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace crossword::tools
