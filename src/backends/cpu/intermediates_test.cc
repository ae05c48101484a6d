// Named intermediates: the CPU executor reports every tensor of docs/model.md section 5, and
// FirstDivergence finds the first layer where two runs part (two identical executors agree
// everywhere; a twin whose blk.2.post_attention_norm is perturbed parts exactly at layer 2's
// ffn_norm).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backends/cpu/executor.h"
#include "base/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/recorder.h"
#include "tools/synth.h"

namespace crossword::model {
namespace {

std::string SynthFile() {
  return tools::SynthesizeOnce({.preset = "tiny",
                                .type = "F32",
                                .layout = "upstream",
                                .arch = "qwen35moe",
                                .seed = 3,
                                .output = ::testing::TempDir() + "/it_tiny.gguf",
                                .threads = 2});
}

// A copy of `src` whose F32 tensor `name` is multiplied by `scale`.
std::string ScaledCopy(const std::string& src, const std::string& name, float scale) {
  gguf::File f = gguf::File::Open(src);
  const std::string out = ::testing::TempDir() + "/it_scaled.gguf";
  gguf::Writer w(out);
  for (const auto& kv : f.metadata()) w.AddKeyValue(std::string(kv.key), kv.value);
  bool found = false;
  for (const auto& t : f.tensors()) w.AddTensor(t.name, t.type, std::span(t.ne.data(), t.n_dims));
  for (const auto& t : f.tensors()) {
    std::vector<std::byte> bytes(t.bytes().begin(), t.bytes().end());
    if (t.name == name) {
      EXPECT_EQ(t.type, GgmlType::kF32);
      found = true;
      for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
        float v;
        std::memcpy(&v, bytes.data() + i, 4);
        v *= scale;
        std::memcpy(bytes.data() + i, &v, 4);
      }
    }
    w.WriteTensorData(bytes);
  }
  w.Finish();
  EXPECT_TRUE(found) << name;
  return out;
}

struct Runner {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Executor> exec;
  explicit Runner(const std::string& path) {
    LoadOptions lo;
    lo.logger = Logger::Silent();
    model = Model::Load(path, lo);
    exec = std::make_unique<backends::cpu::CpuExecutor>(
        model, backends::cpu::CpuOptions{.threads = 2, .repack = true, .logger = Logger::Silent()});
  }
  // A 12-token prompt then 2 single-token steps, recorded.
  TensorRecorder Record() const {
    TensorRecorder rec;
    auto st = exec->NewState({});
    auto ctx = exec->NewContext({});
    std::mt19937 rng(7);
    std::vector<int32_t> toks(12);
    for (int32_t& t : toks) t = static_cast<int32_t>(rng() % 1000);
    SequenceInput in{st.get(), toks, PassKind::kCausal, LogitRows::kAll};
    exec->Forward({&in, 1}, *ctx, &rec);
    for (int i = 0; i < 2; ++i) {
      SequenceInput step{st.get(), std::span(toks).subspan(i, 1)};
      exec->Forward({&step, 1}, *ctx, &rec);
    }
    return rec;
  }
};

TEST(NamedIntermediates, EveryTensorOfTheSpecIsReportedInPassOrder) {
  Runner r(SynthFile());
  const TensorRecorder rec = r.Record();
  const Hparams& hp = r.model->hparams();
  ASSERT_EQ(rec.tensors().size(), 3u * (1 + 6 * hp.n_layer + 2));
  EXPECT_EQ(rec.tensors()[0].name, "inp_embd");
  EXPECT_EQ(rec.tensors()[0].rows, 12);
  EXPECT_EQ(rec.tensors()[0].cols, hp.n_embd);
  for (int il = 0; il < hp.n_layer; ++il) {
    const RecordedTensor& mixer = rec.tensors()[1 + 6 * il + 1];
    EXPECT_EQ(mixer.layer, il);
    EXPECT_EQ(mixer.name, hp.is_recurrent(il) ? "gdn_out" : "attn_out");
  }
  const RecordedTensor& logits = rec.tensors()[6 * hp.n_layer + 2];
  EXPECT_EQ(logits.name, "result_output");
  EXPECT_EQ(logits.rows, 12);
  EXPECT_EQ(logits.cols, hp.n_vocab);
  // A filtered recorder keeps only what it asks for.
  TensorRecorder only({"l_out"});
  EXPECT_TRUE(only.Wants("l_out", 0));
  EXPECT_FALSE(only.Wants("ffn_out", 0));
}

TEST(NamedIntermediates, IdenticalExecutorsAgreeEverywhere) {
  const std::string path = SynthFile();
  const TensorRecorder a = Runner(path).Record();
  const TensorRecorder b = Runner(path).Record();
  const auto d = FirstDivergence(a, b, 0.0);
  EXPECT_FALSE(d.has_value()) << d->Describe(0.0);
}

TEST(NamedIntermediates, FindsTheFirstLayerWhereAPerturbedTwinParts) {
  const std::string path = SynthFile();
  const TensorRecorder a = Runner(path).Record();
  const TensorRecorder b =
      Runner(ScaledCopy(path, "blk.2.post_attention_norm.weight", 1.01f)).Record();
  const double bound = 1e-10;
  const auto d = FirstDivergence(a, b, bound);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->layer, 2) << d->Describe(bound);
  EXPECT_EQ(d->name, "ffn_norm") << d->Describe(bound);
  EXPECT_GT(d->nmse, 1e-6);  // a 1% scale: NMSE about 1e-4
  // Everything before it was bit-identical.
  for (size_t i = 0; i < d->index; ++i) EXPECT_EQ(a.tensors()[i].data, b.tensors()[i].data) << i;
}

}  // namespace
}  // namespace crossword::model
