// The Vulkan runtime: device listing and selection, memory pools and uploads (pieces of
// tensors larger than one binding), hazard-tracked barriers, replay of recorded command lists.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "backends/vulkan/ops.h"
#include "backends/vulkan/test_util.h"
#include "base/error.h"

namespace crossword::vulkan {
namespace {

using testing::Guarded;
using testing::PathConfig;
using testing::VkTest;

DeviceInfo Fake(int index, DeviceType type, uint64_t mem, bool usable = true) {
  DeviceInfo d;
  d.index = index;
  d.name = "dev" + std::to_string(index);
  d.type = type;
  d.device_local_bytes = mem;
  d.usable = usable;
  if (!usable) d.unusable_reason = "test";
  return d;
}

TEST(VulkanSelect, PrefersDiscreteOverIntegratedWhateverTheOrder) {
  const DeviceInfo devs[] = {Fake(0, DeviceType::kIntegrated, 64ull << 30),
                             Fake(1, DeviceType::kDiscrete, 24ull << 30),
                             Fake(2, DeviceType::kCpu, 128ull << 30)};
  std::string why;
  EXPECT_EQ(SelectDevice(devs, -1, true, &why), 1);
  EXPECT_EQ(SelectDevice(devs, -1, false, &why), 1);
  EXPECT_EQ(SelectDevice(devs, 0, false, &why), 0);  // an explicit index is honoured
}

TEST(VulkanSelect, LargestDiscreteThenIntegratedThenCpuOnlyWhenAllowed) {
  const DeviceInfo two[] = {Fake(0, DeviceType::kDiscrete, 8ull << 30),
                            Fake(1, DeviceType::kDiscrete, 16ull << 30)};
  std::string why;
  EXPECT_EQ(SelectDevice(two, -1, false, &why), 1);
  const DeviceInfo cpu[] = {Fake(0, DeviceType::kCpu, 8ull << 30)};
  EXPECT_EQ(SelectDevice(cpu, -1, false, &why), -1);
  EXPECT_NE(why.find("no usable Vulkan GPU"), std::string::npos) << why;
  EXPECT_EQ(SelectDevice(cpu, -1, true, &why), 0);
  const DeviceInfo bad[] = {Fake(0, DeviceType::kDiscrete, 8ull << 30, false),
                            Fake(1, DeviceType::kIntegrated, 1ull << 30)};
  EXPECT_EQ(SelectDevice(bad, -1, false, &why), 1);
  EXPECT_EQ(SelectDevice(bad, 0, false, &why), -1);
  EXPECT_NE(why.find("unusable"), std::string::npos) << why;
  EXPECT_EQ(SelectDevice(bad, 7, false, &why), -1);
  EXPECT_EQ(SelectDevice({}, -1, true, &why), -1);
}

TEST(VulkanList, DescribesEveryDeviceOrSaysWhyNone) {
  std::string why;
  const std::vector<DeviceInfo> devices = ListDevices(&why);
  if (devices.empty()) GTEST_SKIP() << "no Vulkan device: " << why;
  for (const DeviceInfo& d : devices) {
    const std::string line = DescribeDevice(d);
    EXPECT_NE(line.find(d.name), std::string::npos);
    EXPECT_NE(line.find("subgroup"), std::string::npos);
    if (d.usable) {
      EXPECT_GT(d.subgroup_size, 0u);
      EXPECT_GT(d.max_storage_range, 0u);
    }
  }
}

using VulkanRuntime = VkTest;

TEST_F(VulkanRuntime, UploadAndReadBackThroughPieces) {
  // A 40-row Q8_0 matrix of 2048 columns is 87 KiB; with 1 MiB bindings it is one piece, so
  // use an expert stack of 16 experts x 40 rows (16 x 87 KiB > 1 MiB): several pieces.
  DeviceMatrix m;
  m.type = GgmlType::kQ8_0;
  m.n_in = 2048;
  m.n_out = 40;
  m.n_expert = 16;
  std::vector<uint8_t> data(*RowBytes(m.type, m.n_in) * m.n_out * m.n_expert);
  std::iota(data.begin(), data.end(), 0);
  // A 64 KiB staging buffer: where device memory is not host-visible (a discrete GPU) the
  // upload goes through it in many submissions, each chunk split across pieces; where it is
  // (lavapipe), each piece is written directly.
  constexpr uint64_t kStaging = uint64_t{64} << 10;
  Uploader up(dev(), kStaging);
  UploadMatrix(pool(), up, m, data.data(), "stack");
  uint64_t last = 0, calls = 0;
  up.Run([&](uint64_t done, uint64_t total) {
    EXPECT_EQ(total, data.size());
    EXPECT_GE(done, last);  // progress only grows
    last = done;
    ++calls;
  });
  EXPECT_EQ(last, data.size());
  ASSERT_GT(m.pieces.size(), 1u);
  const bool mapped = m.pieces[0].view.host != nullptr;
  EXPECT_GE(calls, mapped ? m.pieces.size() : (data.size() + kStaging - 1) / kStaging)
      << (mapped ? "direct writes" : "staged");
  int64_t next = 0;
  for (const DeviceMatrix::Piece& p : m.pieces) {
    EXPECT_EQ(p.first, next);
    EXPECT_LE(p.view.size, dev().max_binding_bytes());
    next += p.count;
    std::vector<uint8_t> back(p.view.size);
    ReadBuffer(dev(), p.view, back.data(), back.size());
    EXPECT_EQ(std::memcmp(back.data(), data.data() + p.first * m.expert_bytes(), back.size()), 0);
  }
  EXPECT_EQ(next, m.n_expert);
}

TEST_F(VulkanRuntime, BarriersOnlyOnHazardsAndReplayReadsNewInputs) {
  const int64_t n = 1000;
  std::vector<float> a = testing::RandomFloats(rng_, n), b = testing::RandomFloats(rng_, n);
  BufferView va = Upload(a), vb = Upload(b);
  Guarded y1 = Output(n * 4), y2 = Output(n * 4), y3 = Output(n * 4);
  for (const PathConfig& c : ReductionConfigs()) {
    auto cl = Record(c, [&](CommandList& l) {
      Add(l, va, vb, y1.view, n);            // independent
      Add(l, vb, va, y2.view, n);            // independent of the first: no barrier
      Add(l, y1.view, y2.view, y3.view, n);  // reads both: one barrier
      Add(l, va, va, y1.view, n);            // overwrites y1 that the third read: one barrier
    });
    EXPECT_EQ(cl->dispatch_count(), 4);
    EXPECT_EQ(cl->barrier_count(), 2);
    cl->Run();
    std::vector<float> r3 = Read<float>(y3), r1 = Read<float>(y1);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(r3[i], (a[i] + b[i]) + (b[i] + a[i])) << i;
      ASSERT_EQ(r1[i], a[i] + a[i]) << i;
    }
    // Replay after changing an input in place: the recorded list reads the new values.
    std::vector<float> a2 = testing::RandomFloats(rng_, n);
    WriteBuffer(dev(), va, a2.data(), n * 4);
    cl->Run();
    r3 = Read<float>(y3);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(r3[i], (a2[i] + b[i]) + (b[i] + a2[i])) << i;
    WriteBuffer(dev(), va, a.data(), n * 4);
  }
}

// The safety net itself: two writes to one range with no barrier between them, recorded
// behind the tracker's back, must be reported by synchronization validation.
TEST_F(VulkanRuntime, SynchronizationValidationReportsAMissingBarrier) {
  if (!dev().validation_enabled()) GTEST_SKIP() << "validation layer off";
  BufferView b = pool().Allocate(4096, "b");
  const PathConfig c = ReductionConfigs().back();
  Run(c, [&](CommandList& l) {
    vkCmdFillBuffer(l.handle(), b.buffer, b.offset, 4096, 1);
    vkCmdFillBuffer(l.handle(), b.buffer, b.offset, 4096, 2);
  });
  const std::vector<std::string> msgs = dev().TakeValidationMessages();
  bool hazard = false;
  for (const std::string& m : msgs) hazard = hazard || m.find("SYNC-HAZARD") != std::string::npos;
  EXPECT_TRUE(hazard) << msgs.size() << " messages, none a SYNC-HAZARD";
}

TEST_F(VulkanRuntime, OversizedBindingIsAClearError) {
  BufferView big = pool().Allocate(dev().max_binding_bytes() + 1024, "big");
  const PathConfig c = ReductionConfigs().back();
  EXPECT_THROW(Run(c, [&](CommandList& l) { Add(l, big, big, big, big.size / 4); }), Error);
}

}  // namespace
}  // namespace crossword::vulkan
