// Pipelined row blocks (docs/pass-cost-log.md, "Pipelined row blocks"): a row-split pass of one
// sequence in which each block of rows goes through the layers on its own thread and meets the
// other blocks only where a layer mixes rows, instead of all threads meeting twice per layer.
#include <algorithm>
#include <cstring>
#include <thread>

#include "backends/cpu/executor.h"
#include "backends/cpu/state.h"
#include "base/error.h"
#include "core/cpu_relax.h"

namespace crossword::backends::cpu {

using model::PassKind;
using model::SequenceInput;

namespace {

// A block's progress: the last stage it finished, in pass order: per layer kIn, kConv, then
// kHead0 + h once GDN head h has run the block's tokens, kHead0 + n_v_heads (Mix) once every head
// has (attention: once the block's K/V rows are stored).
enum Step : int64_t {
  kIn = 0,    // the layer's In part of the block's rows (GDN: the qkv rows and their own conv)
  kConv = 1,  // GDN: the block's conv rows that read the block before it
  kHead0 = 2,
};
struct Stages {
  explicit Stages(const model::Hparams& hp) : mix(kHead0 + hp.ssm_n_v_heads) {}
  int64_t operator()(int il, int64_t step) const { return il * (mix + 1) + step; }
  int64_t mix;
};

// Thrown by a waiting block when another block failed: the failing block's exception is the
// pass's error, so the waiting ones just leave.
struct PipelineAborted {};

constexpr int kPauseIterations = 256;  // then the waiting thread yields its core

}  // namespace

void CpuExecutor::WaitForBlock(CpuContext& ctx, int q, int64_t stage) {
  const std::atomic<int64_t>& at = ctx.progress_[static_cast<size_t>(q)].stage;
  for (int i = 0;; ++i) {
    if (at.load(std::memory_order_acquire) >= stage) return;
    if (ctx.pipeline_failed_.load(std::memory_order_relaxed)) throw PipelineAborted{};
    if (i < kPauseIterations) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
}

void CpuExecutor::RunPipelined(int first_layer, const SequenceInput& in, const SeqSpan& sp,
                               std::span<const int64_t> bounds, CpuContext& ctx,
                               const BlockParts& parts) const {
  const int n_blocks = static_cast<int>(bounds.size()) - 1;
  Check(n_blocks >= 2 && n_blocks <= pool_->size(), "RunPipelined: {} row blocks on {} threads",
        n_blocks, pool_->size());
  for (int p = 0; p < n_blocks; ++p)
    ctx.progress_[static_cast<size_t>(p)].stage.store(-1, std::memory_order_relaxed);
  ctx.pipeline_failed_.store(false, std::memory_order_relaxed);
  // The K/V rows of every attention layer, as AttentionCore notes them (one thread).
  auto& st = static_cast<CpuState&>(*in.state);
  for (int il = first_layer; il < hp_.n_layer; ++il) {
    if (!w_.layers[il].is_recurrent()) st.NoteKvWrite(sp.n_past, sp.T);
  }
  const size_t n_expert = static_cast<size_t>(hp_.n_expert);
  const Stages stage(hp_);
  pool_->RunOnEachThread([&](int p) {
    if (p >= n_blocks) return;
    const int64_t r0 = bounds[static_cast<size_t>(p)];
    const int64_t n = bounds[static_cast<size_t>(p) + 1] - r0;
    RowScratch& s = ctx.parts_[static_cast<size_t>(p)];
    std::atomic<int64_t>& done = ctx.progress_[static_cast<size_t>(p)].stage;
    try {
      parts.in(parts.self, first_layer, r0, n, s);
      done.store(stage(first_layer, kIn), std::memory_order_release);
      int prev_gdn = -1;  // the last GDN layer before il
      for (int il = first_layer; il < hp_.n_layer; ++il) {
        if (w_.layers[il].is_recurrent()) {
          GdnBlockCore(il, in, sp, r0, n, p, n_blocks, prev_gdn, ctx);
          prev_gdn = il;
        } else {
          AttentionBlockCore(il, in, sp, r0, n, p, n_blocks, ctx);
        }
        if (il + 1 == hp_.n_layer) {  // the last layer's Out part on its kept rows, the head
          parts.tail(parts.self, il, r0, n, s);
          break;
        }
        // A GDN layer's In part overwrites this block's qkv rows, which the next block's first
        // conv rows of the last GDN layer read.
        if (p + 1 < n_blocks && prev_gdn >= 0 && w_.layers[il + 1].is_recurrent())
          WaitForBlock(ctx, p + 1, stage(prev_gdn, kConv));
        parts.out_in(parts.self, il, r0, n, s);
        std::copy(s.used.begin(), s.used.end(),
                  s.used_by_layer.begin() + static_cast<std::ptrdiff_t>(il * n_expert));
        done.store(stage(il + 1, kIn), std::memory_order_release);
      }
    } catch (const PipelineAborted&) {
      // Another block failed; its exception is the pass's.
    } catch (...) {
      ctx.pipeline_failed_.store(true, std::memory_order_relaxed);
      throw;
    }
  });
}

void CpuExecutor::GdnBlockCore(int il, const SequenceInput& in, const SeqSpan& sp, int64_t r0,
                               int64_t n, int p, int n_blocks, int prev_gdn,
                               CpuContext& ctx) const {
  const Stages stage(hp_);
  const int r = layer_slot_[il];
  const int K = hp_.ssm_d_conv;
  auto& st = static_cast<CpuState&>(*in.state);
  RowScratch& s = ctx.parts_[static_cast<size_t>(p)];
  std::atomic<int64_t>& done = ctx.progress_[static_cast<size_t>(p)].stage;
  float* conv_state = st.conv_state(r);
  float* ssm_state = st.ssm_state(r);
  const bool denoise = in.kind == PassKind::kDenoise;
  if (denoise) ssm_state = ctx.F(ctx.at_.gdn_scratch) + sp.seq * ctx.gdn_scratch_floats_;
  const int64_t t0 = r0 - sp.row0, t1 = t0 + n;
  // The first K-1 conv rows, whose windows reach into the block before (GdnIn left them).
  if (p > 0 && K > 1) {
    WaitForBlock(ctx, p - 1, stage(il, kIn));
    GdnConvRows(il, r0, std::min(r0 + K - 1, r0 + n), sp.row0, conv_state, s.conv_window.data(),
                ctx);
  }
  done.store(stage(il, kConv), std::memory_order_release);
  CpuState::Record rec{};
  if (in.record) {
    rec = st.record(r);
    GdnRecordRows(rec, sp, t0, t1, ctx);
  }
  if (p == 0) {
    if (denoise) {
      // One scratch state per sequence: the last block must be done with the layer before.
      if (prev_gdn >= 0) WaitForBlock(ctx, n_blocks - 1, stage(prev_gdn, stage.mix));
      GdnDenoiseState(st.ssm_state(r), st.ssm_floats(), ssm_state);
    }
    if (in.record) {
      std::memcpy(rec.conv0, conv_state, sizeof(float) * st.conv_floats());
      std::memcpy(rec.ssm0, ssm_state, sizeof(float) * st.ssm_floats());
    }
  }
  // Head by head, each from the state the block before left after its tokens, so that the next
  // block can start a head as soon as this one is done with it.
  const kernels::GdnArgs args = GdnArgsFor(sp, ssm_state, t0, t1, ctx);
  for (int hv = 0; hv < hp_.ssm_n_v_heads; ++hv) {
    if (p > 0) WaitForBlock(ctx, p - 1, stage(il, kHead0 + hv));
    kernels::GatedDeltaRuleHead(args, hv);
    done.store(stage(il, kHead0 + hv), std::memory_order_release);
  }
  // Every block has read the conv state (block 0's first rows) once the one before us is done.
  if (p + 1 == n_blocks && !denoise && K > 1)
    AdvanceConvState(conv_state, sp, s.conv_window.data(), ctx);
  done.store(stage(il, stage.mix), std::memory_order_release);
}

void CpuExecutor::AttentionBlockCore(int il, const SequenceInput& in, const SeqSpan& sp, int64_t r0,
                                     int64_t n, int p, int n_blocks, CpuContext& ctx) const {
  const Stages stage(hp_);
  const int a_idx = layer_slot_[il];
  auto& st = static_cast<CpuState&>(*in.state);
  const int64_t t0 = r0 - sp.row0, t1 = t0 + n;
  AttentionPrologue(il, a_idx, st, sp, t0, t1, ctx);
  ctx.progress_[static_cast<size_t>(p)].stage.store(stage(il, stage.mix),
                                                    std::memory_order_release);
  // A causal query reads the K/V rows of the blocks before it; a denoise block's, every block's.
  const bool causal = in.kind == PassKind::kCausal;
  for (int q = 0; q < n_blocks; ++q) {
    if (q != p && (!causal || q < p)) WaitForBlock(ctx, q, stage(il, stage.mix));
  }
  kernels::AttentionRows(AttentionArgsFor(a_idx, st, sp, causal, ctx), t0, t1);
}

}  // namespace crossword::backends::cpu
