// Registry tests: names resolve (or fail with a message that says what to do), "auto" picks a
// discrete GPU only, and the CPU executor made through the registry runs the forward contract.
#include "backends/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "base/error.h"
#include "tools/synth.h"

namespace crossword::backends {
namespace {

std::string ErrorOf(const ExecutorOptions& o) {
  try {
    ResolveDevice(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Registry, CpuIsAlwaysThereAndListedFirst) {
  const std::vector<DeviceInfo> devices = ListDevices(Logger::Silent());
  ASSERT_FALSE(devices.empty());
  EXPECT_EQ(devices[0].backend, "cpu");
  EXPECT_FALSE(devices[0].discrete);
  ExecutorOptions o;
  o.device = "cpu";
  EXPECT_EQ(ResolveDevice(o), "cpu");
}

TEST(Registry, AutoPicksADiscreteGpuElseTheCpu) {
  bool discrete = false;
  std::string first_discrete;
  for (const DeviceInfo& d : ListDevices(Logger::Silent())) {
    if (d.discrete && first_discrete.empty()) first_discrete = d.backend;
    discrete = discrete || d.discrete;
  }
  ExecutorOptions o;
  o.logger = Logger::Silent();
  EXPECT_EQ(ResolveDevice(o), discrete ? first_discrete : "cpu");
}

TEST(Registry, UnknownDeviceNamesTheChoices) {
  ExecutorOptions o;
  o.device = "tpu";
  const std::string msg = ErrorOf(o);
  EXPECT_NE(msg.find("--device tpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("auto"), std::string::npos) << msg;
}

TEST(Registry, AnUnavailableBackendSaysWhyAndWhatWorks) {
  for (const Backend& b : Backends()) {
    const std::string why = b.unavailable();
    if (why.empty()) continue;
    ExecutorOptions o;
    o.device = std::string(b.name);
    const std::string msg = ErrorOf(o);
    EXPECT_NE(msg.find(why), std::string::npos) << msg;
    EXPECT_NE(msg.find("--device cpu"), std::string::npos) << msg;
  }
}

std::shared_ptr<const model::Model> TinyModel() {
  const std::string path =
      tools::SynthesizeOnce({.preset = "tiny",
                             .layout = "upstream",
                             .arch = "qwen35moe",
                             .output = ::testing::TempDir() + "/registry_tiny.gguf",
                             .threads = 2});
  model::LoadOptions lo;
  lo.logger = Logger::Silent();
  return model::Model::Load(path, lo);
}

TEST(Registry, CreatesAWorkingCpuExecutor) {
  std::shared_ptr<const model::Model> m = TinyModel();
  ExecutorOptions o;
  o.device = "cpu";
  o.threads = 2;
  o.logger = Logger::Silent();
  o.n_gpu_layers = -2;
  EXPECT_THROW(CreateExecutor(m, o), Error);
  o.n_gpu_layers = 99;  // no GPU: ignored by the CPU executor
  std::unique_ptr<model::Executor> x = CreateExecutor(m, o);
  EXPECT_EQ(x->name(), "cpu");
  EXPECT_EQ(x->host_threads(), 2);
  auto st = x->NewState({});
  auto ctx = x->NewContext({});
  const int32_t toks[] = {1, 2, 3};
  model::SequenceInput in{st.get(), toks};
  x->Forward({&in, 1}, *ctx);
  EXPECT_EQ(st->n_past(), 3);
  EXPECT_EQ(ctx->n_logit_rows(0), 1);
  EXPECT_EQ(static_cast<int64_t>(ctx->logits(0).size()), m->hparams().n_vocab);
  // A state of one executor is refused by another (its memory lives elsewhere).
  std::unique_ptr<model::Executor> other = CreateExecutor(m, o);
  EXPECT_THROW(other->Forward({&in, 1}, *ctx), Error);
  auto ctx2 = other->NewContext({});
  EXPECT_THROW(other->Forward({&in, 1}, *ctx2), Error);
  EXPECT_EQ(st->n_past(), 3);
}

// --device vulkan by name: the Vulkan executor (lavapipe included), -ngl 2 of 4 layers (the
// split executor), -ngl 0 (the CPU executor): 12 greedy tokens identical across all of them.
TEST(Registry, VulkanByNameAndNglSplitsGiveTheCpuTokens) {
  const Backend* vk = nullptr;
  for (const Backend& b : Backends()) vk = b.name == "vulkan" ? &b : vk;
  ASSERT_NE(vk, nullptr);
  if (const std::string why = vk->unavailable(); !why.empty()) GTEST_SKIP() << "vulkan: " << why;
  if (vk->devices(Logger::Silent()).empty()) GTEST_SKIP() << "no usable Vulkan device";
  std::shared_ptr<const model::Model> m = TinyModel();
  ExecutorOptions o;
  o.threads = 2;
  o.logger = Logger::Silent();
  o.device = "cpu";
  std::unique_ptr<model::Executor> cpu = CreateExecutor(m, o);
  o.device = "vulkan";
  o.n_gpu_layers = 0;
  EXPECT_EQ(CreateExecutor(m, o)->name(), "cpu");
  o.n_gpu_layers = -1;
  std::unique_ptr<model::Executor> gpu = CreateExecutor(m, o);
  o.n_gpu_layers = 2;
  std::unique_ptr<model::Executor> split = CreateExecutor(m, o);
  EXPECT_EQ(gpu->name(), "vulkan");
  EXPECT_NE(split->Describe().find("layers 2-3"), std::string::npos) << split->Describe();
  auto greedy = [](const model::Executor& x) {
    auto st = x.NewState({});
    auto ctx = x.NewContext({});
    std::vector<int32_t> toks = {5, 6, 7, 8, 9, 10, 11, 12, 13};
    std::vector<int32_t> out;
    model::SequenceInput in{st.get(), toks};
    x.Forward({&in, 1}, *ctx);
    for (int i = 0; i < 12; ++i) {
      const auto l = ctx->logits(0);
      out.push_back(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
      model::SequenceInput step{st.get(), {&out.back(), 1}};
      x.Forward({&step, 1}, *ctx);
    }
    EXPECT_EQ(st->n_past(), 9 + 12);
    return out;
  };
  const std::vector<int32_t> want = greedy(*cpu);
  EXPECT_EQ(greedy(*gpu), want);
  EXPECT_EQ(greedy(*split), want);
}

}  // namespace
}  // namespace crossword::backends
