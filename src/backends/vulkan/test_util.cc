// Vulkan test support (test_util.h).
#include "backends/vulkan/test_util.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/error.h"
#include "base/fp16.h"
#include "core/quant_blocks.h"

namespace crossword::vulkan::testing {
namespace {

struct Shared {
  std::unique_ptr<Device> device;
  std::string why;
  bool tried = false;
};

Shared& State() {
  static Shared s;
  return s;
}

}  // namespace

Device* SharedDevice(std::string* why) {
  Shared& s = State();
  if (!s.tried) {
    s.tried = true;
    std::string list_why;
    const std::vector<DeviceInfo> devices = ListDevices(&list_why);
    if (devices.empty()) {
      s.why = list_why;
    } else {
      DeviceOptions o;
      const char* index = std::getenv("CROSSWORD_VK_DEVICE");
      o.index = index && *index ? std::atoi(index) : -1;
      o.allow_cpu = true;
      const char* novalid = std::getenv("CROSSWORD_VK_NO_VALIDATION");
      o.validation = !(novalid && std::string(novalid) == "1");
      if (!o.validation) {
        std::fprintf(
            stderr,
            "crossword vulkan tests: validation layer OFF (CROSSWORD_VK_NO_VALIDATION=1)\n");
      }
      o.max_binding_bytes = uint64_t{1} << 20;
      // CROSSWORD_VK_STAGE=1: uploads and read-backs through staging buffers, as on a discrete
      // GPU (lavapipe's device memory is host-visible and would be written directly).
      const char* stage = std::getenv("CROSSWORD_VK_STAGE");
      o.stage_device_memory = stage && std::string(stage) == "1";
      o.on_validation_message = [](std::string_view msg) {
        std::fprintf(stderr, "VALIDATION: %.*s\n", static_cast<int>(msg.size()), msg.data());
      };
      const char* level = std::getenv("CROSSWORD_VK_LOG");
      o.logger = Logger(level && *level ? ParseLogLevel(level) : LogLevel::kError);
      try {
        s.device = Device::Open(o);
        // Close the device before static destruction: the driver (loaded while opening it)
        // registered its own exit-time teardown first, so a device destroyed from this
        // function-local static would be destroyed after the driver's teardown (a segfault at
        // exit on NVIDIA's driver, after every test had passed). atexit runs in reverse order.
        std::atexit([] { State().device.reset(); });
        std::fprintf(stderr, "crossword vulkan tests on %s\n",
                     DescribeDevice(s.device->info()).c_str());
      } catch (const Error& e) {
        s.why = e.what();
      }
    }
  }
  if (!s.device && why) *why = s.why;
  return s.device.get();
}

std::string PathConfig::Name() const {
  std::string s = reduction == Reduction::kSubgroup ? "subgroup" : "shared";
  if (mat_path == MatPath::kInt8) s += "/int8";
  if (mat_path == MatPath::kFloat) s += "/float";
  return s;
}

void VkTest::SetUp() {
  std::string why;
  dev_ = SharedDevice(&why);
  if (!dev_) GTEST_SKIP() << "no usable Vulkan device: " << why;
  dev_->TakeValidationMessages();
  pool_ = std::make_unique<MemoryPool>(*dev_, MemoryKind::kDevice, uint64_t{16} << 20);
  host_pool_ = std::make_unique<MemoryPool>(*dev_, MemoryKind::kHost, uint64_t{1} << 20);
  up_ = std::make_unique<Uploader>(*dev_, uint64_t{4} << 20);
}

void VkTest::TearDown() {
  if (!dev_) return;
  up_.reset();
  pool_.reset();
  host_pool_.reset();
  const std::vector<std::string> msgs = dev_->TakeValidationMessages();
  std::string all;
  for (const std::string& m : msgs) all += m + "\n";
  EXPECT_TRUE(msgs.empty()) << msgs.size() << " validation message(s):\n" << all;
}

std::vector<PathConfig> VkTest::ReductionConfigs(MatPath mat_path) {
  std::vector<PathConfig> out;
  if (dev_->subgroup_ok()) out.push_back({Reduction::kSubgroup, mat_path});
  out.push_back({Reduction::kShared, mat_path});
  return out;
}

std::vector<PathConfig> VkTest::MatConfigs() {
  std::vector<PathConfig> out;
  for (MatPath p : {MatPath::kFloat, MatPath::kInt8}) {
    if (p == MatPath::kInt8 && !dev_->info().int8_dot) continue;
    for (PathConfig c : ReductionConfigs(p)) out.push_back(c);
  }
  return out;
}

BufferView VkTest::UploadRaw(const void* data, uint64_t bytes) {
  BufferView whole = pool_->Allocate(bytes + 8, "test input");
  BufferView v = whole.Sub(4, bytes);
  WriteBuffer(*dev_, v, data, bytes);
  return v;
}

Guarded VkTest::Output(uint64_t bytes, const void* init) {
  Guarded g;
  g.whole = pool_->Allocate(bytes + 2 * kGuardBytes, "test output");
  g.view = g.whole.Sub(kGuardBytes, bytes);
  std::vector<uint8_t> fill(g.whole.size, kSentinel);
  if (init) std::memcpy(fill.data() + kGuardBytes, init, bytes);
  WriteBuffer(*dev_, g.whole, fill.data(), fill.size());
  return g;
}

void VkTest::ReadChecked(const Guarded& g, void* out) {
  std::vector<uint8_t> all(g.whole.size);
  ReadBuffer(*dev_, g.whole, all.data(), all.size());
  size_t bad = 0;
  for (uint64_t i = 0; i < kGuardBytes; ++i) {
    bad += all[i] != kSentinel;
    bad += all[all.size() - 1 - i] != kSentinel;
  }
  EXPECT_EQ(bad, 0u) << "bytes written outside the output view";
  std::memcpy(out, all.data() + kGuardBytes, g.view.size);
}

BufferView VkTest::Params(const std::vector<int32_t>& words) {
  BufferView v = host_pool_->Allocate(std::max<size_t>(words.size(), 1) * 4, "test params");
  SetParams(v, words);
  return v;
}

void VkTest::SetParams(BufferView params, const std::vector<int32_t>& words) {
  std::memcpy(params.host, words.data(), words.size() * 4);
}

std::unique_ptr<CommandList> VkTest::Record(const PathConfig& config,
                                            const std::function<void(CommandList&)>& fn,
                                            BufferView params) {
  up_->Run();  // pending weight uploads
  auto cl = std::make_unique<CommandList>(*dev_);
  OpConfig oc;
  oc.reduction = config.reduction;
  oc.mat_path = config.mat_path;
  cl->Begin(params, oc);
  fn(*cl);
  cl->End();
  return cl;
}

double Nmse(const float* a, const double* ref, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = a[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
  return num / den;
}

double Nmse(const std::vector<float>& a, const std::vector<double>& ref) {
  EXPECT_EQ(a.size(), ref.size());
  return Nmse(a.data(), ref.data(), std::min(a.size(), ref.size()));
}

double Nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  std::vector<double> r(ref.begin(), ref.end());
  return Nmse(a, r);
}

std::vector<float> RandomFloats(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<uint8_t> RandomWeightBytes(GgmlType type, int64_t n_in, int64_t n_rows,
                                       std::mt19937& rng) {
  const size_t rb = *RowBytes(type, n_in);
  std::vector<uint8_t> data(rb * n_rows);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f), scale(0.5f, 1.0f);
  for (auto& b : data) b = static_cast<uint8_t>(byte(rng));
  auto half = [](uint8_t* p, float v) {
    const uint16_t h = F32ToF16(v);
    std::memcpy(p, &h, 2);
  };
  for (int64_t r = 0; r < n_rows; ++r) {
    uint8_t* row = data.data() + r * rb;
    switch (type) {
      case GgmlType::kF32:
        for (int64_t k = 0; k < n_in; ++k) {
          const float v = unit(rng);
          std::memcpy(row + 4 * k, &v, 4);
        }
        break;
      case GgmlType::kF16:
        for (int64_t k = 0; k < n_in; ++k) half(row + 2 * k, unit(rng));
        break;
      case GgmlType::kBF16:
        for (int64_t k = 0; k < n_in; ++k) {
          const uint16_t h = F32ToBF16(unit(rng));
          std::memcpy(row + 2 * k, &h, 2);
        }
        break;
      case GgmlType::kQ4_0:  // |q - 8| <= 8
        for (int64_t b = 0; b < n_in / 32; ++b) half(row + b * 18, scale(rng) / 8);
        break;
      case GgmlType::kQ8_0:
        for (int64_t b = 0; b < n_in / 32; ++b) half(row + b * 34, scale(rng) / 128);
        break;
      case GgmlType::kQ4_K:  // d * sc * q with sc < 64, q < 16; dmin * m with m < 64
      case GgmlType::kQ5_K:  // q < 32
        for (int64_t b = 0; b < n_in / 256; ++b) {
          uint8_t* blk = row + b * (type == GgmlType::kQ4_K ? 144 : 176);
          const float qmax = type == GgmlType::kQ4_K ? 15.0f : 31.0f;
          half(blk, scale(rng) / (63 * qmax));
          half(blk + 2, scale(rng) / (63 * 2));
        }
        break;
      case GgmlType::kQ6_K:  // d * sc * (q - 32), |sc| <= 128, |q - 32| <= 32
        for (int64_t b = 0; b < n_in / 256; ++b) half(row + b * 210 + 208, scale(rng) / 4096);
        break;
      default:
        Fail("RandomWeightBytes: no generator for {}", TypeName(type));
    }
  }
  return data;
}

void ExpectWithin(const std::vector<float>& got, const std::vector<double>& want,
                  const std::vector<double>& tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(tol.size(), want.size()) << what;
  int shown = 0;
  size_t bad = 0;
  double num = 0.0, den = 0.0, allowed = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(got[i] - want[i]);
    num += d * d;
    den += want[i] * want[i];
    allowed += tol[i] * tol[i];
    if (!(d <= tol[i])) {
      ++bad;
      if (shown++ < 5) {
        ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i]
                      << " (|diff| " << d << " > bound " << tol[i] << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements out of bounds";
  const double nmse = den > 0 ? num / den : num;
  const double nmse_bound = den > 0 ? allowed / den : allowed;
  EXPECT_LE(nmse, nmse_bound) << what;
  if (std::getenv("CROSSWORD_VK_VERBOSE")) {
    std::fprintf(stderr, "%s: NMSE %.3g (bound %.3g)\n", what.c_str(), nmse, nmse_bound);
  }
}

}  // namespace crossword::vulkan::testing
