// The executor registry: which backends this build has, which devices they see, and making the
// executor a user asked for by name (`--device cpu|vulkan|auto`, `-ngl N`). The engine goes
// through here, so nothing above it names a backend.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/log.h"
#include "model/forward.h"
#include "model/model.h"

namespace crossword::backends {

/// What the user asked for (the flags of run, serve, bench, logits).
struct ExecutorOptions {
  /// "cpu", "vulkan", or "auto": the first discrete GPU some built GPU backend sees, else "cpu".
  std::string device = "auto";
  /// Layers placed on the GPU (llama.cpp's -ngl / --n-gpu-layers): < 0 all of them ("auto" or
  /// not given), 0 none, N the first N trunk layers; the rest run on the CPU. Ignored by "cpu".
  int n_gpu_layers = -1;
  int threads = 0;     ///< host threads (0: all hardware threads)
  bool repack = true;  ///< CPU: tile-layout copies of quantized matrices (--no-repack)
  Logger logger;
};

/// Help texts of the device flags, one copy for every command that has them (run, logits, bench,
/// check, serve).
inline constexpr const char* kDeviceFlagHelp =
    "executor: cpu, vulkan, or auto (a discrete Vulkan GPU if present, else cpu)";
inline constexpr const char* kGpuLayersFlagHelp =
    "layers on the GPU, the rest on the CPU (-1: all; as llama.cpp's -ngl); also -ngl N";
inline constexpr const char* kListDevicesFlagHelp =
    "list the devices this build can use, then exit";

/// One device a backend can run on (`--list-devices`).
struct DeviceInfo {
  std::string backend;      ///< registry name: "cpu", "vulkan"
  int index = 0;            ///< index among that backend's devices
  std::string name;         ///< e.g. "NVIDIA GeForce RTX 4090", "llvmpipe", the CPU model
  std::string description;  ///< driver, SIMD target, memory; one line
  bool discrete = false;    ///< a discrete GPU ("auto" picks only these)
  size_t memory_bytes = 0;  ///< device memory (0: host memory / unknown)
};

/// One backend of this build: its name, whether it can run here, its devices and its factory.
struct Backend {
  std::string_view name;
  /// Empty when usable in this build; else why not (e.g. "not built: no Vulkan SDK").
  std::string (*unavailable)();
  std::vector<DeviceInfo> (*devices)(const Logger& logger);
  std::unique_ptr<model::Executor> (*create)(std::shared_ptr<const model::Model> model,
                                             const ExecutorOptions& options);
};

/// Every backend the registry knows (built or not), "cpu" first.
std::span<const Backend> Backends();

/// Every device of every usable backend, CPU first. Never throws: a backend whose probe fails
/// logs a warning and lists nothing.
std::vector<DeviceInfo> ListDevices(const Logger& logger);

/// The `--list-devices` text: one line per device ("cpu:0  NAME  (description)", GPUs with
/// their memory and "discrete"/"integrated"), then one line per backend this build cannot use
/// and why.
std::string DescribeDevices(const Logger& logger);

/// The backend name `options.device` resolves to on this machine ("auto" resolved; others
/// checked). Throws crossword::Error for an unknown name (listing the known ones) or a backend
/// this build or machine cannot run (saying why and that --device cpu works).
std::string ResolveDevice(const ExecutorOptions& options);

/// Makes the executor for `model` that `options` asks for (ResolveDevice), and logs which.
/// Throws crossword::Error as ResolveDevice, or with the backend's own error.
std::unique_ptr<model::Executor> CreateExecutor(std::shared_ptr<const model::Model> model,
                                                const ExecutorOptions& options);

}  // namespace crossword::backends
