// The split executor of -ngl N (llama.cpp's meaning): trunk layers [0, N) on a Vulkan device,
// layers [N, n_layer) and the output head on the CPU; the residual stream of each pass is
// copied from the device to the host between the two (docs/gpu.md, "Executor").
#pragma once

#include <memory>
#include <string>

#include "backends/cpu/executor.h"
#include "backends/vulkan/executor.h"
#include "model/forward.h"

namespace crossword::backends {

class SplitExecutor final : public model::Executor {
 public:
  /// `gpu` runs layers [0, gpu->n_layers()), `cpu` the rest; both of `model`.
  SplitExecutor(std::shared_ptr<const model::Model> model,
                std::unique_ptr<vulkan::VulkanExecutor> gpu, std::unique_ptr<cpu::CpuExecutor> cpu);
  const model::Model& model() const override { return *model_; }
  std::string_view name() const override { return "vulkan"; }
  std::string Describe() const override;
  int host_threads() const override { return cpu_->host_threads(); }
  ThreadPool* host_pool() const override { return cpu_->host_pool(); }
  /// A state of each executor behind one model::SequenceState.
  std::unique_ptr<model::SequenceState> NewState(const model::StateOptions& options) const override;
  std::unique_ptr<model::ForwardContext> NewContext(
      const model::ContextOptions& options) const override;
  /// Per input and per chunk of the device's pass size: the device's layers, the hidden state
  /// to the host, the CPU's layers and head. Observers are refused.
  void Forward(std::span<const model::SequenceInput> seqs, model::ForwardContext& ctx,
               model::ForwardObserver* observer = nullptr) const override;

 private:
  std::shared_ptr<const model::Model> model_;
  std::unique_ptr<vulkan::VulkanExecutor> gpu_;
  std::unique_ptr<cpu::CpuExecutor> cpu_;
};

}  // namespace crossword::backends
