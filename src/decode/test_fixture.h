// Test helpers of the decode tests: the synthesized tiny model, a CPU executor over it, and
// DecodeParams in one call.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/executor.h"
#include "base/log.h"
#include "decode/generation.h"
#include "model/model.h"
#include "tools/synth.h"

namespace crossword::decode::test_fixture {

inline std::string SynthTiny(const std::string& name, uint64_t seed = 1,
                             const std::string& type = "F32") {
  return tools::SynthesizeOnce({.preset = "tiny",
                                .type = type,
                                .layout = "official",
                                .arch = "clover_moe",
                                .seed = seed,
                                .output = ::testing::TempDir() + "/dt_" + name,
                                .threads = 2});
}

struct Fixture {
  std::shared_ptr<const model::Model> model;
  std::unique_ptr<model::Executor> exec;
  explicit Fixture(const std::string& path) {
    model::LoadOptions lo;
    lo.logger = Logger::Silent();
    model = model::Model::Load(path, lo);
    exec = std::make_unique<backends::cpu::CpuExecutor>(
        model, backends::cpu::CpuOptions{.threads = 2, .repack = true, .logger = Logger::Silent()});
  }
  std::unique_ptr<model::SequenceState> State(int64_t n_ctx = 1024,
                                              GgmlType kv = GgmlType::kF16) const {
    model::StateOptions so;
    so.n_ctx = n_ctx;
    so.kv_type = kv;
    so.max_record_tokens = 64;
    return exec->NewState(so);
  }
};

inline DecodeParams Params(Mode mode, int block, float tau, int64_t max_tokens,
                           std::vector<int32_t> eog, int32_t mask) {
  DecodeParams p;
  p.mode = mode;
  p.block_size = block;
  p.threshold = tau;
  p.max_tokens = max_tokens;
  p.eog_ids = std::move(eog);
  p.mask_id = mask;
  return p;
}

}  // namespace crossword::decode::test_fixture
