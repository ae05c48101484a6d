// The executor registry: a fixed table of the backends this build knows (no global registration,
// so no mutable globals), device listing, and "auto" resolution.
#include "backends/registry.h"

#include <array>
#include <fstream>
#include <span>
#include <thread>

#include "backends/cpu/executor.h"
#include "base/error.h"
#include "kernels/kernels.h"

#if CROSSWORD_HAVE_VULKAN
#include <unistd.h>

#include <cstdio>

#include "backends/split.h"
#include "backends/vulkan/device.h"
#include "backends/vulkan/executor.h"
#endif

namespace crossword::backends {
namespace {

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  }
  return "CPU";
}

std::string CpuUnavailable() { return {}; }

std::vector<DeviceInfo> CpuDevices(const Logger&) {
  DeviceInfo d;
  d.backend = "cpu";
  d.name = CpuModelName();
  d.description =
      fmt::format("Highway target {}, {} hardware threads", kernels::CurrentTargetName(),
                  std::max(1u, std::thread::hardware_concurrency()));
  return {d};
}

std::unique_ptr<model::Executor> CreateCpu(std::shared_ptr<const model::Model> model,
                                           const ExecutorOptions& options) {
  cpu::CpuOptions o;
  o.threads = options.threads;
  o.repack = options.repack;
  o.logger = options.logger;
  return std::make_unique<cpu::CpuExecutor>(std::move(model), o);
}

#if CROSSWORD_HAVE_VULKAN
std::string VulkanUnavailable() { return {}; }

std::vector<DeviceInfo> VulkanDevices(const Logger&) {
  std::vector<DeviceInfo> out;
  for (const vulkan::DeviceInfo& v : vulkan::ListDevices()) {
    if (!v.usable) continue;
    DeviceInfo d;
    d.backend = "vulkan";
    d.index = v.index;
    d.name = v.name;
    d.description = vulkan::DescribeDevice(v);
    d.discrete = v.type == vulkan::DeviceType::kDiscrete;
    d.memory_bytes = v.device_local_bytes;
    out.push_back(std::move(d));
  }
  return out;
}

std::unique_ptr<model::Executor> CreateVulkan(std::shared_ptr<const model::Model> model,
                                              const ExecutorOptions& options) {
  const int n_layer = model->hparams().n_layer;
  if (options.n_gpu_layers == 0) {
    options.logger.Info("-ngl 0: every layer runs on the CPU");
    return CreateCpu(std::move(model), options);
  }
  vulkan::DeviceOptions d;
  d.allow_cpu = true;  // --device vulkan asked for it: lavapipe too (auto picks discrete GPUs)
  d.logger = options.logger;
  vulkan::ExecutorOptions e;
  if (::isatty(STDERR_FILENO) && options.logger.Enabled(LogLevel::kInfo)) {
    e.progress = [](uint64_t done, uint64_t total) {
      std::fprintf(stderr, "\rvulkan: weights %5.1f%% (%llu / %llu MiB)%s",
                   total ? 100.0 * done / total : 100.0,
                   static_cast<unsigned long long>(done >> 20),
                   static_cast<unsigned long long>(total >> 20), done == total ? "\n" : "");
    };
  }
  if (options.n_gpu_layers > 0 && options.n_gpu_layers < n_layer) {
    // -ngl N: layers [0, N) on the device, the rest and the head on the CPU.
    e.n_layers = options.n_gpu_layers;
    std::unique_ptr<vulkan::VulkanExecutor> gpu = vulkan::VulkanExecutor::Open(model, d, e);
    cpu::CpuOptions c;
    c.threads = options.threads;
    c.repack = options.repack;
    c.first_layer = options.n_gpu_layers;
    c.logger = options.logger;
    auto host = std::make_unique<cpu::CpuExecutor>(model, c);
    return std::make_unique<SplitExecutor>(std::move(model), std::move(gpu), std::move(host));
  }
  return vulkan::VulkanExecutor::Open(std::move(model), d, e);
}
#else
std::string VulkanUnavailable() {
  return "not built: this build has no Vulkan support (scripts/install-deps installs "
         "libvulkan-dev and glslc; reconfigure with CMake)";
}

std::vector<DeviceInfo> VulkanDevices(const Logger&) { return {}; }

std::unique_ptr<model::Executor> CreateVulkan(std::shared_ptr<const model::Model>,
                                              const ExecutorOptions&) {
  Fail("--device vulkan: {}", VulkanUnavailable());
}
#endif

// The one list of backends. A new backend is one more entry here (and its folder).
constexpr std::array kBackends = {
    Backend{"cpu", CpuUnavailable, CpuDevices, CreateCpu},
    Backend{"vulkan", VulkanUnavailable, VulkanDevices, CreateVulkan},
};

const Backend* Find(std::string_view name) {
  for (const Backend& b : kBackends) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

}  // namespace

std::span<const Backend> Backends() { return kBackends; }

std::vector<DeviceInfo> ListDevices(const Logger& logger) {
  std::vector<DeviceInfo> out;
  for (const Backend& b : kBackends) {
    if (!b.unavailable().empty()) continue;
    try {
      std::vector<DeviceInfo> d = b.devices(logger);
      out.insert(out.end(), d.begin(), d.end());
    } catch (const std::exception& e) {
      logger.Warn("{}: listing devices failed: {}", b.name, e.what());
    }
  }
  return out;
}

std::string DescribeDevices(const Logger& logger) {
  std::string out;
  for (const DeviceInfo& d : ListDevices(logger)) {
    std::string extra = d.description;
    if (d.backend != "cpu") {
      extra +=
          fmt::format("{}{}", extra.empty() ? "" : ", ", d.discrete ? "discrete" : "not discrete");
      if (d.memory_bytes > 0) extra += fmt::format(", {:.1f} GiB", d.memory_bytes / 1073741824.0);
    }
    out += fmt::format("{}:{}  {}  ({})\n", d.backend, d.index, d.name, extra);
  }
  for (const Backend& b : kBackends) {
    if (const std::string why = b.unavailable(); !why.empty())
      out += fmt::format("{}: {}\n", b.name, why);
  }
  return out;
}

std::string ResolveDevice(const ExecutorOptions& options) {
  if (options.device == "auto") {
    for (const DeviceInfo& d : ListDevices(options.logger)) {
      if (d.discrete) return d.backend;
    }
    return "cpu";
  }
  const Backend* b = Find(options.device);
  if (!b) {
    std::string names;
    for (const Backend& k : kBackends) names += fmt::format("{}, ", k.name);
    Fail(
        "--device {}: unknown device; use one of {}auto (--list-devices shows what this machine "
        "has)",
        options.device, names);
  }
  if (const std::string why = b->unavailable(); !why.empty()) {
    Fail("--device {}: {}; --device cpu runs on this machine's CPU", options.device, why);
  }
  return std::string(b->name);
}

std::unique_ptr<model::Executor> CreateExecutor(std::shared_ptr<const model::Model> model,
                                                const ExecutorOptions& options) {
  if (options.n_gpu_layers < -1) {
    Fail("-ngl / --n-gpu-layers must be >= 0, or -1 for all layers (got {})", options.n_gpu_layers);
  }
  const std::string name = ResolveDevice(options);
  if (name == "cpu" && options.n_gpu_layers > 0 && options.device == "auto") {
    options.logger.Warn("-ngl {}: no discrete GPU found, every layer runs on the CPU",
                        options.n_gpu_layers);
  }
  std::unique_ptr<model::Executor> e = Find(name)->create(std::move(model), options);
  options.logger.Info("executor: {} ({} host threads)", e->Describe(), e->host_threads());
  return e;
}

}  // namespace crossword::backends
