// The CPU executor's tile copies of quantized weights (RepackWeights, repack.h): Q4_0 copies
// that replace a read-only mapping's pages, and what the load says when they cannot.
#include "backends/cpu/repack.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/executor.h"
#include "base/error.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "tools/synth.h"

namespace crossword::model {
namespace {

using backends::cpu::CpuExecutor;
using backends::cpu::CpuOptions;

// A tiny qwen35moe file in the official layout with Q4_0 weights (its head Q6_K, as llama.cpp's
// Q4_0 files).
std::string SynthQ4() {
  return tools::SynthesizeOnce({.preset = "tiny",
                                .type = "Q4_0",
                                .layout = "upstream",
                                .arch = "qwen35moe",
                                .seed = 1,
                                .output = ::testing::TempDir() + "/rp_q4.gguf",
                                .threads = 2});
}

std::vector<int32_t> RandomTokens(int n, int seed, int vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

// Resident bytes (the Rss line of /proc/self/smaps) of the mapping that holds `p`; 0 when none.
size_t MappingRssBytes(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool in = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      in = a >= lo && a < hi;
    } else if (in && line.starts_with("Rss:")) {
      return static_cast<size_t>(std::stoull(line.substr(4))) * 1024;
    }
  }
  return 0;
}

// Q4_0 tile copies have the file's size, so from a read-only mapping of the file they replace
// its pages (issue 18): taken with no allowance at all, the source pages given back, and no bit
// changes, including for an executor without copies that reads the given-back rows again.
TEST(CpuExecutor, Q4_0CopiesReplaceTheMappedFilePagesWithTheSameBits) {
  LoadOptions lo;
  lo.logger = Logger::Silent();
  const std::shared_ptr<const Model> model = Model::Load(SynthQ4(), lo);
  const kernels::Matrix& gate = model->weights().layers[0].ffn_gate_exps.first;
  ASSERT_EQ(gate.type, GgmlType::kQ4_0);
  ASSERT_EQ(model->weights().output.type, GgmlType::kQ6_K);  // as llama.cpp's Q4_0 files
  if (kernels::RepackedBytes(gate) == 0) GTEST_SKIP() << "no tile layout on this CPU";
  // The policy: no allowance, so only copies that replace mapped pages are made, and only within
  // the cap on all copies and from the first layer this executor runs.
  {
    using backends::cpu::RepackLimits;
    using backends::cpu::RepackWeights;
    const auto mapping = model->file().refaultable_bytes();
    auto limits = [](size_t max_total, std::span<const std::byte> file_mapping, int first_layer) {
      RepackLimits l;
      l.max_total = max_total;
      l.file_mapping = file_mapping;
      l.first_layer = first_layer;
      return l;  // max_added stays 0
    };
    const size_t cap = size_t{1} << 40;
    Weights w = model->weights();
    EXPECT_EQ(RepackWeights(w, limits(cap, {}, 0), Logger::Silent()), 0u);
    EXPECT_EQ(w.layers[0].ffn_gate_exps.first.packed, nullptr);
    // A span that does not hold the weights (a tensor converted at load) releases nothing.
    const std::vector<std::byte> elsewhere(64);
    EXPECT_EQ(RepackWeights(w, limits(cap, elsewhere, 0), Logger::Silent()), 0u);
    // Replacing copies stay within the cap on all copies (anonymous memory, not page cache).
    EXPECT_EQ(RepackWeights(w, limits(0, mapping, 0), Logger::Silent()), 0u);
    // Layers another executor runs (-ngl) get none.
    const int n_layer = static_cast<int>(w.layers.size());
    ASSERT_GE(n_layer, 2);
    EXPECT_GT(RepackWeights(w, limits(cap, mapping, n_layer - 1), Logger::Silent()), 0u);
    EXPECT_EQ(w.layers[0].ffn_gate_exps.first.packed, nullptr);
    EXPECT_NE(w.layers[n_layer - 1].ffn_gate_exps.first.packed, nullptr);
    // The replaced pages leave the process: with every page of the mapping read first, its
    // resident size falls by about the copies' size (each expert's first and last partial page
    // stay).
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < mapping.size(); i += 4096)
      sink = sink + static_cast<uint8_t>(mapping[i]);
    const size_t rss0 = MappingRssBytes(mapping.data());
    Weights all = model->weights();
    const size_t replaced = RepackWeights(all, limits(cap, mapping, 0), Logger::Silent());
    EXPECT_GT(replaced, 0u);
    const size_t rss1 = MappingRssBytes(mapping.data());
    EXPECT_GT(rss0, replaced);
    EXPECT_GE(rss0 - std::min(rss0, rss1), replaced * 3 / 4)
        << "resident bytes of the mapping " << rss0 << " -> " << rss1 << ", copies " << replaced;
    EXPECT_NE(all.layers[0].ffn_gate_exps.first.packed, nullptr);
    EXPECT_EQ(all.output.packed, nullptr);  // Q6_K's copy is 1.33x the file's bytes: it adds
  }
  std::FILE* log = std::tmpfile();
  ASSERT_NE(log, nullptr);
  CpuExecutor copies(
      model, CpuOptions{.threads = 2, .repack = true, .logger = Logger(LogLevel::kInfo, log)});
  CpuExecutor plain(model, CpuOptions{.threads = 2, .repack = false, .logger = Logger::Silent()});
  std::rewind(log);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), log));
  std::fclose(log);
  EXPECT_NE(text.find("replace the file's pages"), std::string::npos) << text;
  ContextOptions co;
  co.max_tokens = 64;
  co.max_logit_rows = 64;
  StateOptions so;
  so.n_ctx = 128;
  auto run = [&](CpuExecutor& exec) {
    auto ctx = exec.NewContext(co);
    auto st = exec.NewState(so);
    std::vector<float> out;
    const auto prompt = RandomTokens(24, 7, 1500);
    for (std::span<const int32_t> toks :
         {std::span<const int32_t>(prompt), std::span<const int32_t>(prompt).first(1)}) {
      SequenceInput in{st.get(), toks, PassKind::kCausal, LogitRows::kAll, false};
      exec.Forward({&in, 1}, *ctx);
      const auto l = ctx->logits(0);
      out.insert(out.end(), l.begin(), l.end());
    }
    return out;
  };
  const std::vector<float> a = run(copies), b = run(plain);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

// A model read into memory (--no-mmap) has no file pages to replace: the load says so, and its
// Q4_0 copies come out of the allowance instead.
TEST(CpuExecutor, CopiesSayWhyTheyDoNotReplaceFilePages) {
  LoadOptions lo;
  lo.logger = Logger::Silent();
  lo.map.use_mmap = false;
  const std::shared_ptr<const Model> model = Model::Load(SynthQ4(), lo);
  if (kernels::RepackedBytes(model->weights().layers[0].ffn_gate_exps.first) == 0) {
    GTEST_SKIP() << "no tile layout on this CPU";
  }
  EXPECT_TRUE(model->file().refaultable_bytes().empty());
  std::FILE* log = std::tmpfile();
  ASSERT_NE(log, nullptr);
  CpuExecutor exec(
      model, CpuOptions{.threads = 1, .repack = true, .logger = Logger(LogLevel::kInfo, log)});
  std::rewind(log);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), log));
  std::fclose(log);
  EXPECT_NE(text.find("but the model was read into memory (--no-mmap)"), std::string::npos) << text;
  EXPECT_EQ(text.find("copies replace the file's pages"), std::string::npos) << text;
}

}  // namespace
}  // namespace crossword::model
