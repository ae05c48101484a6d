// Test support for the Vulkan backend: one device per test binary with the Khronos validation
// layer and synchronization validation (any message fails the test that caused it), skipping
// with a visible reason where no Vulkan device exists; guarded output buffers whose sentinel
// bytes must survive; NMSE and random data helpers.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/vulkan/commands.h"
#include "backends/vulkan/device.h"
#include "backends/vulkan/memory.h"
#include "core/types.h"

namespace crossword::vulkan::testing {

/// The device shared by the tests of this process, opened on first use: CROSSWORD_VK_DEVICE
/// picks an index (default: automatic, CPU implementations allowed), validation on unless
/// CROSSWORD_VK_NO_VALIDATION=1. nullptr (and *why) when there is no usable device.
/// max_binding_bytes is lowered to 1 MiB so tests exercise the splitting of big tensors.
Device* SharedDevice(std::string* why);

/// Bytes of sentinel around every guarded buffer (not a multiple of 16, so views start at
/// unaligned offsets and the binding-offset push constants are exercised).
constexpr uint64_t kGuardBytes = 260;
constexpr uint8_t kSentinel = 0xA5;

struct Guarded {
  BufferView whole;
  BufferView view;
};

/// A combination of the paths ops can record with.
struct PathConfig {
  Reduction reduction;
  MatPath mat_path;
  std::string Name() const;
};

class VkTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  Device& dev() { return *dev_; }
  MemoryPool& pool() { return *pool_; }
  MemoryPool& host_pool() { return *host_pool_; }
  Uploader& uploader() { return *up_; }

  /// The reduction paths this device offers (both on lavapipe); int8 paths where supported.
  std::vector<PathConfig> ReductionConfigs(MatPath mat_path = MatPath::kAuto);
  std::vector<PathConfig> MatConfigs();

  /// Device buffer holding `data`, at an unaligned offset (4 bytes past an aligned start).
  template <typename T>
  BufferView Upload(const std::vector<T>& data) {
    return UploadRaw(data.data(), data.size() * sizeof(T));
  }
  BufferView UploadRaw(const void* data, uint64_t bytes);
  /// A guarded output buffer of `bytes` (contents: sentinel bytes unless init is given).
  Guarded Output(uint64_t bytes, const void* init = nullptr);
  /// Reads the view of g back and checks that its guards still hold the sentinel.
  template <typename T>
  std::vector<T> Read(const Guarded& g) {
    std::vector<T> out(g.view.size / sizeof(T));
    ReadChecked(g, out.data());
    return out;
  }
  void ReadChecked(const Guarded& g, void* out);
  /// Parameter buffer (host-visible int32 words) for DynInt slots.
  BufferView Params(const std::vector<int32_t>& words);
  void SetParams(BufferView params, const std::vector<int32_t>& words);

  /// Records with fn under `config`, runs once; returns the list for replays / statistics.
  std::unique_ptr<CommandList> Record(const PathConfig& config,
                                      const std::function<void(CommandList&)>& fn,
                                      BufferView params = {});
  void Run(const PathConfig& config, const std::function<void(CommandList&)>& fn,
           BufferView params = {}) {
    Record(config, fn, params)->Run();
  }

  std::mt19937 rng_{1234};

 private:
  Device* dev_ = nullptr;
  std::unique_ptr<MemoryPool> pool_, host_pool_;
  std::unique_ptr<Uploader> up_;
};

/// Normalized mean squared error sum (a - ref)^2 / sum ref^2 (0 when both are zero).
double Nmse(const float* a, const double* ref, size_t n);
double Nmse(const std::vector<float>& a, const std::vector<double>& ref);
double Nmse(const std::vector<float>& a, const std::vector<float>& ref);
/// Uniform floats in [lo, hi).
std::vector<float> RandomFloats(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f);

/// Random GGUF rows of `type` (n_rows rows of n_in elements): random quant bytes, scales chosen
/// so that dequantized values stay within about [-1, 1].
std::vector<uint8_t> RandomWeightBytes(GgmlType type, int64_t n_in, int64_t n_rows,
                                       std::mt19937& rng);

/// Expects |got[i] - want[i]| <= tol[i] for every i (reporting the first failures), and
/// reports the NMSE next to the largest NMSE those bounds allow (sum tol^2 / sum want^2).
void ExpectWithin(const std::vector<float>& got, const std::vector<double>& want,
                  const std::vector<double>& tol, const std::string& what);

/// Unit roundoff of float32 (2^-24) and the worst-case relative error bound of a float sum of
/// n terms (gamma_n = n u / (1 - n u), Higham, Accuracy and Stability of Numerical Algorithms,
/// 2nd ed., eq. 3.4): |fl(sum) - sum| <= gamma_{n-1} sum |terms|.
constexpr double kUnit = 1.0 / (1 << 24);
inline double Gamma(double n) { return n * kUnit / (1.0 - n * kUnit); }

}  // namespace crossword::vulkan::testing
