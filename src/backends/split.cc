// SplitExecutor: -ngl N with the first N layers on a Vulkan device and the rest on the CPU.
#include "backends/split.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/error.h"

namespace crossword::backends {
namespace {

// A sequence's state on both sides (each side keeps its own KV / GDN layers; the outer
// bookkeeping mirrors theirs, since both see every pass).
class SplitState final : public model::SequenceState {
 public:
  SplitState(const model::Executor& owner, const model::StateOptions& o,
             std::unique_ptr<model::SequenceState> gpu, std::unique_ptr<model::SequenceState> cpu)
      : model::SequenceState(owner, o), gpu(std::move(gpu)), cpu(std::move(cpu)) {}
  size_t MemoryBytes() const override { return gpu->MemoryBytes() + cpu->MemoryBytes(); }
  std::unique_ptr<model::SequenceState> gpu, cpu;

 protected:
  struct Payload final : model::SnapshotPayload {
    model::StateSnapshot gpu, cpu;
    size_t MemoryBytes() const override {
      return (gpu.payload ? gpu.payload->MemoryBytes() : 0) +
             (cpu.payload ? cpu.payload->MemoryBytes() : 0);
    }
  };
  void ResetRecurrent() override {
    gpu->Reset();
    cpu->Reset();
  }
  void SaveRecurrent(std::unique_ptr<model::SnapshotPayload>& payload) const override {
    auto* p = dynamic_cast<Payload*>(payload.get());
    if (!p) {
      payload = std::make_unique<Payload>();
      p = static_cast<Payload*>(payload.get());
    }
    gpu->SaveSnapshot(p->gpu);
    cpu->SaveSnapshot(p->cpu);
  }
  bool RecurrentFits(const model::SnapshotPayload& payload) const override {
    const auto* p = dynamic_cast<const Payload*>(&payload);
    return p && gpu->CanRestore(p->gpu) && cpu->CanRestore(p->cpu);
  }
  void RestoreRecurrent(const model::SnapshotPayload& payload) override {
    const auto& p = static_cast<const Payload&>(payload);
    gpu->Restore(p.gpu);
    cpu->Restore(p.cpu);
  }
  void ReplayRecurrent(int64_t n_keep) override {
    gpu->RollbackTo(n_keep);
    cpu->RollbackTo(n_keep);
  }
};

// Logits in host memory plus the CPU side's context and the hidden rows of one chunk.
class SplitContext final : public model::ForwardContext {
 public:
  SplitContext(const model::Executor& owner, const model::ContextOptions& o,
               std::unique_ptr<model::ForwardContext> cpu, int64_t chunk, int64_t n_embd,
               int64_t n_vocab)
      : model::ForwardContext(owner, o), cpu(std::move(cpu)), n_vocab(n_vocab) {
    Check(o.max_tokens >= 1 && o.max_seqs >= 1 && o.max_logit_rows >= 1,
          "forward context: max_tokens, max_seqs and max_logit_rows must be >= 1");
    hidden.assign(static_cast<size_t>(chunk * n_embd), 0.0f);
    logits_.assign(static_cast<size_t>(o.max_logit_rows * n_vocab), 0.0f);
    offset.assign(o.max_seqs, 0);
    count.assign(o.max_seqs, 0);
  }
  std::span<const float> logits(int s) const override {
    Check(s >= 0 && s < static_cast<int>(count.size()), "logits: no sequence {}", s);
    return {logits_.data() + offset[s] * n_vocab, static_cast<size_t>(count[s] * n_vocab)};
  }
  int64_t n_logit_rows(int s) const override {
    Check(s >= 0 && s < static_cast<int>(count.size()), "logits: no sequence {}", s);
    return count[s];
  }
  std::unique_ptr<model::ForwardContext> cpu;
  int64_t n_vocab;
  std::vector<float> hidden, logits_;
  std::vector<int64_t> offset, count;
};

}  // namespace

SplitExecutor::SplitExecutor(std::shared_ptr<const model::Model> model,
                             std::unique_ptr<vulkan::VulkanExecutor> gpu,
                             std::unique_ptr<cpu::CpuExecutor> cpu)
    : model_(std::move(model)), gpu_(std::move(gpu)), cpu_(std::move(cpu)) {}

std::string SplitExecutor::Describe() const {
  return fmt::format("layers 0-{} on {}; layers {}-{} and the head on {}", gpu_->n_layers() - 1,
                     gpu_->Describe(), gpu_->n_layers(), hparams().n_layer - 1, cpu_->Describe());
}

std::unique_ptr<model::SequenceState> SplitExecutor::NewState(
    const model::StateOptions& options) const {
  return std::make_unique<SplitState>(*this, options, gpu_->NewState(options),
                                      cpu_->NewState(options));
}

std::unique_ptr<model::ForwardContext> SplitExecutor::NewContext(
    const model::ContextOptions& options) const {
  const int64_t chunk = gpu_->options().max_tokens;
  model::ContextOptions c;
  c.max_tokens = chunk;
  c.max_seqs = 1;
  c.max_logit_rows = chunk;
  return std::make_unique<SplitContext>(*this, options, cpu_->NewContext(c), chunk,
                                        hparams().n_embd, hparams().n_vocab);
}

void SplitExecutor::Forward(std::span<const model::SequenceInput> seqs,
                            model::ForwardContext& ctx_base,
                            model::ForwardObserver* observer) const {
  model::ValidateBatch(*this, seqs, ctx_base);
  Check(observer == nullptr, "-ngl split: forward observers are not supported; use --device cpu");
  auto& ctx = static_cast<SplitContext&>(ctx_base);
  const int64_t chunk = gpu_->options().max_tokens, V = hparams().n_vocab;
  for (const model::SequenceInput& in : seqs) {
    Check(in.kind == model::PassKind::kCausal || static_cast<int64_t>(in.tokens.size()) <= chunk,
          "-ngl split: a denoise block of {} tokens exceeds the pass size {}", in.tokens.size(),
          chunk);
  }
  std::fill(ctx.count.begin(), ctx.count.end(), 0);
  int64_t row = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const model::SequenceInput& in = seqs[s];
    auto& st = static_cast<SplitState&>(*in.state);
    const int64_t T = static_cast<int64_t>(in.tokens.size());
    ctx.offset[s] = row;
    for (int64_t at = 0; at < T; at += chunk) {
      const int64_t n = std::min(chunk, T - at);
      const std::span<const int32_t> part = in.tokens.subspan(at, n);
      model::LogitRows r = in.logits;
      if (r == model::LogitRows::kLast && at + n < T) r = model::LogitRows::kNone;
      const int64_t n_past = st.n_past();
      gpu_->ForwardHidden(*st.gpu, part, in.kind, in.record, ctx.hidden.data());
      const model::SequenceInput cin{st.cpu.get(), part, in.kind, r, in.record};
      cpu_->ForwardFrom(gpu_->n_layers(), ctx.hidden.data(), {&cin, 1}, *ctx.cpu);
      const auto l = ctx.cpu->logits(0);
      std::copy(l.begin(), l.end(), ctx.logits_.begin() + row * V);
      row += model::LogitRowCount(r, n);
      st.NoteKvWrite(n_past, n);
      if (in.kind == model::PassKind::kCausal) st.Advance(n, in.record);
    }
    ctx.count[s] = row - ctx.offset[s];
  }
}

}  // namespace crossword::backends
