// Draft passes that skip FFN blocks (SequenceInput::skip_ffn_layers): a skipped layer's FFN adds
// nothing to its rows' residual stream, which is what a copy of the model whose layer has zero
// FFN output projections computes; every row split gives the same bits; a batch that mixes a
// skipping sequence with one that does not gives each its own pass's bits; bad masks fail.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "backends/cpu/executor.h"
#include "base/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tools/synth.h"

namespace crossword::model {
namespace {

using backends::cpu::CpuExecutor;
using backends::cpu::CpuOptions;

std::string SynthFile() {
  return tools::SynthesizeOnce({.preset = "tiny",
                                .type = "F32",
                                .layout = "upstream",
                                .arch = "qwen35moe",
                                .seed = 5,
                                .output = ::testing::TempDir() + "/sf_tiny.gguf",
                                .threads = 2});
}

// A copy of `src` whose F32 tensors in `names` are all zeros.
std::string ZeroedCopy(const std::string& src, const std::set<std::string>& names) {
  gguf::File f = gguf::File::Open(src);
  const std::string out = ::testing::TempDir() + "/sf_zeroed.gguf";
  gguf::Writer w(out);
  for (const auto& kv : f.metadata()) w.AddKeyValue(std::string(kv.key), kv.value);
  for (const auto& t : f.tensors()) w.AddTensor(t.name, t.type, std::span(t.ne.data(), t.n_dims));
  size_t found = 0;
  for (const auto& t : f.tensors()) {
    std::vector<std::byte> bytes(t.bytes().begin(), t.bytes().end());
    if (names.contains(std::string(t.name))) {
      EXPECT_EQ(t.type, GgmlType::kF32) << t.name;
      std::fill(bytes.begin(), bytes.end(), std::byte{0});
      ++found;
    }
    w.WriteTensorData(bytes);
  }
  w.Finish();
  EXPECT_EQ(found, names.size());
  return out;
}

struct Runner {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Executor> exec;
  std::unique_ptr<ForwardContext> ctx;
  Runner(const std::string& path, CpuOptions::RowSplit split) {
    LoadOptions lo;
    lo.logger = Logger::Silent();
    model = Model::Load(path, lo);
    exec = std::make_unique<CpuExecutor>(
        model,
        CpuOptions{.threads = 2, .repack = true, .row_split = split, .logger = Logger::Silent()});
    ContextOptions co;
    co.max_tokens = 64;
    co.max_seqs = 2;
    co.max_logit_rows = 64;
    ctx = exec->NewContext(co);
  }
  std::unique_ptr<SequenceState> State() const {
    StateOptions so;
    so.n_ctx = 128;
    return exec->NewState(so);
  }
  // `prompt` committed (none: a denoise pass at position 0), then one denoise pass of `block`
  // skipping `skip`: its logits.
  std::vector<float> Denoise(std::span<const int32_t> prompt, std::span<const int32_t> block,
                             uint64_t skip) {
    auto st = State();
    SequenceInput p{st.get(), prompt};
    if (!prompt.empty()) exec->Forward({&p, 1}, *ctx);
    SequenceInput d{st.get(), block, PassKind::kDenoise, LogitRows::kAll};
    d.skip_ffn_layers = skip;
    exec->Forward({&d, 1}, *ctx);
    auto l = ctx->logits(0);
    return {l.begin(), l.end()};
  }
};

std::vector<int32_t> Tokens(int n, uint32_t seed, int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(SkipFfn, ASkippedLayerIsALayerWhoseFfnOutputIsZeroInEveryRowSplit) {
  const std::string path = SynthFile();
  const std::string zeroed =
      ZeroedCopy(path, {"blk.1.ffn_down_exps.weight", "blk.1.ffn_down_shexp.weight",
                        "blk.2.ffn_down_exps.weight", "blk.2.ffn_down_shexp.weight"});
  const uint64_t skip = 0b110;  // layers 1 and 2
  for (const auto split : {CpuOptions::RowSplit::kRows, CpuOptions::RowSplit::kColumns}) {
    SCOPED_TRACE(split == CpuOptions::RowSplit::kRows ? "rows" : "columns");
    Runner r(path, split), z(zeroed, split);
    ASSERT_GE(r.model->hparams().n_layer, 4);
    const int64_t V = r.model->hparams().n_vocab;
    // No prompt: the zeroed copy's causal passes would differ from the model's.
    const auto block = Tokens(16, 2, V);
    const std::vector<float> skipped = r.Denoise({}, block, skip);
    EXPECT_TRUE(SameBits(skipped, z.Denoise({}, block, 0)));
    // And it changes the pass (the FFN blocks of layers 1 and 2 do add something).
    EXPECT_FALSE(SameBits(skipped, r.Denoise({}, block, 0)));
  }
}

TEST(SkipFfn, RowSplitsAndMixedBatchesGiveEachSequenceItsOwnPassBits) {
  const std::string path = SynthFile();
  Runner rows(path, CpuOptions::RowSplit::kRows), cols(path, CpuOptions::RowSplit::kColumns);
  const int64_t V = rows.model->hparams().n_vocab;
  const auto prompt = Tokens(20, 3, V), block = Tokens(16, 4, V), other = Tokens(9, 5, V);
  const uint64_t skip = 0b101;  // layers 0 and 2
  const std::vector<float> alone = rows.Denoise(prompt, block, skip);
  EXPECT_TRUE(SameBits(alone, cols.Denoise(prompt, block, skip)));
  // One pass: the skipping draft block and another sequence's 9-token causal prompt, whose row
  // blocks mix rows that skip with rows that do not.
  for (Runner* r : {&rows, &cols}) {
    auto a = r->State(), b = r->State();
    SequenceInput p{a.get(), prompt};
    r->exec->Forward({&p, 1}, *r->ctx);
    std::array<SequenceInput, 2> batch{
        SequenceInput{a.get(), block, PassKind::kDenoise, LogitRows::kAll},
        SequenceInput{b.get(), other, PassKind::kCausal, LogitRows::kAll}};
    batch[0].skip_ffn_layers = skip;
    r->exec->Forward(batch, *r->ctx);
    const auto l0 = r->ctx->logits(0), l1 = r->ctx->logits(1);
    EXPECT_TRUE(SameBits({l0.begin(), l0.end()}, alone));
    auto c = r->State();
    SequenceInput solo{c.get(), other, PassKind::kCausal, LogitRows::kAll};
    const std::vector<float> mixed(l1.begin(), l1.end());
    r->exec->Forward({&solo, 1}, *r->ctx);
    const auto l2 = r->ctx->logits(0);
    EXPECT_TRUE(SameBits(mixed, {l2.begin(), l2.end()}));
  }
}

TEST(SkipFfn, OnlyDenoisePassesBelowTheLastLayerMaySkip) {
  Runner r(SynthFile(), CpuOptions::RowSplit::kAuto);
  const int n_layer = r.model->hparams().n_layer;
  const auto toks = Tokens(4, 6, r.model->hparams().n_vocab);
  auto st = r.State();
  SequenceInput causal{st.get(), toks};
  causal.skip_ffn_layers = 1;
  EXPECT_THROW(r.exec->Forward({&causal, 1}, *r.ctx), Error);
  EXPECT_EQ(st->n_past(), 0);
  SequenceInput last{st.get(), toks, PassKind::kDenoise, LogitRows::kAll};
  last.skip_ffn_layers = uint64_t{1} << (n_layer - 1);
  EXPECT_THROW(r.exec->Forward({&last, 1}, *r.ctx), Error);
  last.skip_ffn_layers = uint64_t{1} << (n_layer - 2);
  EXPECT_NO_THROW(r.exec->Forward({&last, 1}, *r.ctx));
}

}  // namespace
}  // namespace crossword::model
