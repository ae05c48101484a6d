// The CPU executor: forward passes of a Model on this machine's cores with the Highway kernels
// (src/kernels), on a ThreadPool the executor owns. Implements model/forward.h.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cpu/state.h"
#include "base/log.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/model.h"

namespace crossword::backends::cpu {

struct CpuOptions {
  int threads = 0;  ///< 0: all hardware threads
  /// Keep a copy of the quantized matrices in the multi-row kernel's tile layout (RepackWeights)
  /// when it fits in a quarter of the memory limit (physical memory, or a container's cgroup limit
  /// when lower: ProcessMemoryLimit; RepackLimits); --no-repack turns it off. Same results.
  bool repack = true;
  /// Layers below it run on another executor (`-ngl N` splits): no tile copies for them.
  int first_layer = 0;
  /// How a multi-row pass uses the pool (docs/pass-cost-log.md, "Row-split passes"). kRows: each
  /// thread runs the row-independent work of a layer (norms, products, the MoE) for its own block
  /// of rows, one hand-off per layer, instead of one per product; kColumns: every product
  /// splits its output columns across the threads (each weight read once per pass); kAuto:
  /// kRows when every layer's weights fit in about one core's L2 (kRowSplitMaxLayerBytes), where
  /// reading them once per thread costs nothing from memory and the per-product hand-offs
  /// dominate. The same bits either way (the kernels are batch-invariant).
  enum class RowSplit { kAuto, kRows, kColumns };
  RowSplit row_split = RowSplit::kAuto;
  /// Row-split passes of one sequence run as pipelined row blocks (docs/pass-cost-log.md,
  /// "Pipelined row blocks"); false: phase by phase, all threads meeting twice per layer. The same
  /// bits.
  bool pipelined = true;
  Logger logger;
};

/// kAuto's limit on one layer's weights (dense matrices + every expert) for splitting by rows.
inline constexpr size_t kRowSplitMaxLayerBytes = size_t{2} << 20;
/// Row blocks one pass may run at once (threads beyond it wait out the row phases).
inline constexpr int kMaxRowParts = 64;

class CpuExecutor;

/// Scratch of CPU forward passes: one float arena and one int32 arena, sized once from the model
/// and the options (every buffer below, in floats or int32 elements; T = max_tokens,
/// k = n_expert_used, R = max_logit_rows), plus, per row block the executor may run at once
/// (CpuExecutor::row_parts()), the activation buffers of each format the model's matrices
/// consume and the MoE grouping.
class CpuContext final : public model::ForwardContext {
 public:
  CpuContext(const CpuExecutor& executor, const model::ContextOptions& options);
  std::span<const float> logits(int s) const override;
  int64_t n_logit_rows(int s) const override;
  /// Tests: sets row block `part`'s measured time per row, from which the next row-split pass
  /// divides its rows between two blocks. Throws crossword::Error for a part this context lacks.
  void set_row_block_cost(int part, double seconds_per_row);

 private:
  friend class CpuExecutor;
  float* F(size_t offset) { return f_.data() + offset; }
  int32_t* I(size_t offset) { return i_.data() + offset; }

  // What one block of rows needs of its own while threads run blocks side by side: activation
  // buffers (indexed by ActFormat), product jobs, the MoE's per-expert grouping, and which
  // experts its rows selected in the current layer. parts_[0] also serves whole-pass work.
  struct alignas(64) RowScratch {  // (64: blocks write their own timings, on their own lines)
    std::vector<kernels::Activations> acts_main, acts_ff;
    std::vector<kernels::MatMulJob> jobs;  // capacity reserved: 2 * n_expert + 4
    std::vector<int32_t> counts, offsets;  // [n_expert], [n_expert + 1]
    std::vector<uint8_t> used;             // [n_expert]
    std::vector<float> conv_window;        // [ssm_d_conv - 1][conv_dim] (GdnConvRows)
    std::vector<uint8_t> used_by_layer;    // [n_layer][n_expert]: `used` of a pipelined pass
    // A pipelined pass's tail (CpuExecutor::PlanBlockTails): the block's kept last-layer rows,
    // moved to its first rows, and its head rows [tail_head0, tail_head0 + tail_heads).
    // tail_y0: the batch row of the sequence's logit row 0.
    int64_t tail_kept = 0, tail_head0 = 0, tail_heads = 0, tail_y0 = 0;
    double seconds = 0.0;  // this block's time in the last row phase
    double cost = 0.0;     // seconds per row, decayed 0.8 per phase (0: not measured yet)
  };

  std::vector<float> f_;  // one arena for every float buffer
  std::vector<int32_t> i_;
  std::vector<RowScratch> parts_;  // one per row block the executor may run at once
  std::vector<int64_t> seq_logit_offset_, seq_logit_count_;
  // Per sequence of the last pass: the batch row of its first token, and whether MoreLogits may
  // compute its rows (kAll, no fused tail).
  std::vector<int64_t> seq_row0_;
  std::vector<uint8_t> seq_more_ok_;
  std::vector<int32_t> head_y_rows_;  // Output: logit row of each computed head row
  // The last layer's kept rows (CpuExecutor::KeepOutputRows): out_row_[batch row] is the row
  // that holds its final residual (-1: not computed), keep_src_[j] the batch row moved to row j.
  std::vector<int32_t> out_row_, keep_src_;
  // MoE routing with expert_anchor_rows: per batch row, the first anchor row and the number of
  // anchor rows of its sequence (anchor_row_ -1: the row routes freely).
  std::vector<int32_t> anchor_row_, anchor_n_;
  // Per batch row: its sequence's SequenceInput::skip_ffn_layers.
  std::vector<uint64_t> skip_ffn_;
  int64_t n_vocab_ = 0;
  // Offsets into f_ (floats) and i_ (int32), set up by the constructor. Row t is token t of the
  // batch; [a][b] is row-major.
  struct Layout {
    size_t residual;        ///< [T][n_embd] the residual stream (embeddings, then layer outputs)
    size_t normed;          ///< [T][n_embd] RMSNorm of the residual, the input of a sub-block
    size_t block_out;       ///< [T][n_embd] output of the attention/GDN or MoE sub-block
    size_t gdn_qkv;         ///< [T][conv_dim] GDN projection [q | k | v] before the conv
    size_t gdn_z;           ///< [T][d_inner] GDN output gate logits z
    size_t gdn_beta_alpha;  ///< [T][2 n_v_heads] beta logits, then alpha, per token
    size_t gdn_conv;        ///< [T][conv_dim] conv + SiLU output, q and k L2-normalized
    size_t gdn_out;         ///< [T][d_inner] delta-rule output, then gated-normed
    size_t gdn_decay;       ///< [T][n_v_heads] g = softplus(alpha + dt_bias) * ssm_a (<= 0)
    size_t gdn_beta;        ///< [T][n_v_heads] sigmoid(beta logits)
    size_t attn_q_gate;     ///< [T][n_head][q (head_dim) | gate (head_dim)]
    size_t attn_k;          ///< [T][n_head_kv * head_dim]
    size_t attn_v;          ///< [T][n_head_kv * head_dim]
    size_t attn_out;        ///< [T][n_head * head_dim] attention output, then output-gated
    size_t router_logits;   ///< [T][n_expert]
    size_t expert_weights;  ///< [T][k] renormalized top-k router probabilities
    /// [T (k + 1)][n_ff] gate, then SiLU(gate)*up: a block of n rows from row r0 (the whole
    /// pass, or a row-split block) owns rows [r0 (k + 1), (r0 + n)(k + 1)): n*k routed rows
    /// (t*k + slot), then its n shared-expert rows.
    size_t expert_gate;
    size_t expert_up;      ///< [T (k + 1)][n_ff] up projections, laid out as expert_gate
    size_t expert_down;    ///< [T*k][n_embd] routed experts' down projections, row t*k + slot
    size_t shared_down;    ///< [T][n_embd] shared expert's down projection
    size_t output_normed;  ///< [R][n_embd] final RMSNorm of the rows that get logits
    size_t logits;         ///< [R][n_vocab]
    size_t gdn_scratch;    ///< [max_seqs][n_v_heads d_state^2] a denoise pass's GDN state
    size_t expert_ids;     ///< int32 [T][k] selected experts
    size_t rows_x;         ///< int32 [T*k] grouped by expert: input row (token)
    size_t rows_y;         ///< int32 [T*k] grouped by expert: output row (t*k + slot)
  } at_{};
  int64_t gdn_scratch_floats_ = 0;
  // Pipelined row blocks (CpuExecutor::RunPipelined): the last stage each block finished, on its
  // own cache line, and whether a block failed (the others then stop waiting).
  struct alignas(64) Progress {
    std::atomic<int64_t> stage{-1};
  };
  std::array<Progress, kMaxRowParts> progress_{};
  std::atomic<bool> pipeline_failed_{false};
};

/// Runs forward passes on the CPU. Owns its ThreadPool (used by Forward and by its states'
/// RollbackTo, one at a time) and its own view of the weights with the tile-layout copies.
class CpuExecutor final : public model::Executor {
 public:
  /// Builds the pool and (options.repack) the tile copies. Throws crossword::Error on bad options.
  CpuExecutor(std::shared_ptr<const model::Model> model, const CpuOptions& options);

  const model::Model& model() const override { return *model_; }
  std::string_view name() const override { return "cpu"; }
  /// "CPU <Highway target>[ tiles]": the SIMD target, and whether the quantized matrices have
  /// their tile copy (both change the speed).
  std::string Describe() const override;
  int host_threads() const override { return pool_->size(); }
  ThreadPool* host_pool() const override { return pool_.get(); }
  bool fuses_passes() const override { return true; }
  bool skips_ffn() const override { return true; }
  bool computes_more_logits() const override { return true; }
  std::unique_ptr<model::SequenceState> NewState(const model::StateOptions& options) const override;
  std::unique_ptr<model::ForwardContext> NewContext(
      const model::ContextOptions& options) const override;
  void Forward(std::span<const model::SequenceInput> seqs, model::ForwardContext& ctx,
               model::ForwardObserver* observer = nullptr) const override;
  void MoreLogits(model::ForwardContext& ctx, int s, int64_t begin, int64_t end) const override;

  /// Forward from a hidden state: trunk layers [first_layer, n_layer) and the output head run on
  /// `residual` ([batch tokens][n_embd]: the residual stream after layer first_layer - 1, from
  /// a device that ran the layers below) instead of the embedding. The CPU half of a split
  /// (-ngl) executor; the same checks, state updates and logits as Forward.
  void ForwardFrom(int first_layer, const float* residual,
                   std::span<const model::SequenceInput> seqs, model::ForwardContext& ctx) const;

  /// The weights this executor multiplies: the model's, plus tile-layout copies when repacked.
  const model::Weights& weights() const { return w_; }
  /// Whether the quantized matrices have their tile-layout copy.
  bool repacked() const { return w_.packed_storage != nullptr; }
  /// Activation formats the model's matrices consume (what a CpuContext reserves).
  const std::vector<kernels::ActFormat>& activation_formats() const { return formats_; }
  /// Row blocks a multi-row pass may run at once (1: products split by columns only).
  int row_parts() const { return row_parts_; }

 private:
  // Rows [row0, row0 + T) of the batch buffers belong to one sequence at committed length n_past
  // (for the denoise tail of a fused pass: n_past after the pass's causal tokens); `seq` is the
  // sequence's index in the batch (its GDN scratch slot).
  struct SeqSpan {
    int64_t row0 = 0;
    int64_t T = 0;
    int64_t n_past = 0;
    int64_t seq = 0;
  };
  void Run(std::span<const model::SequenceInput> seqs, model::ForwardContext& ctx,
           model::ForwardObserver* observer, int first_layer, const float* residual) const;
  void EmbedTokens(std::span<const model::SequenceInput> seqs, CpuContext& ctx) const;
  using RowScratch = CpuContext::RowScratch;
  // A layer in three parts: In and Out touch rows [r0, r0 + n) only (any block of rows, with
  // its own scratch), Core mixes the rows of each sequence (conv and recurrence, attention).
  // In: projections of the normed input (GDN: also the conv, below); Out: gating, the output
  // projection into block_out.
  // GdnIn also runs the conv (and q/k norms) of its rows whose window stays inside the block or
  // reaches before the sequence (chains: every sequence of the pass and its rows, a fused tail
  // included); GdnCore the rest (the first K-1 rows of a block starting inside a sequence,
  // `bounds` being the row blocks of the phase that ran GdnIn), then advances the conv states.
  void GdnIn(int il, int64_t r0, int64_t n, RowScratch& s, CpuContext& ctx,
             std::span<const model::SequenceInput> seqs, std::span<const SeqSpan> chains) const;
  void GdnCore(int il, int recurrent_index, std::span<const model::SequenceInput> seqs,
               std::span<const SeqSpan> spans, CpuContext& ctx,
               std::span<const model::SequenceInput> chain_seqs, std::span<const SeqSpan> chains,
               std::span<const int64_t> bounds) const;
  // Conv + SiLU, then the q and k heads' L2 norms, of batch rows [t0, t1) of a sequence whose
  // rows start at c0; the K-1 rows before c0 come from `state` (the conv state as the pass found
  // it), `window` is room for K-1 rows. A row gets the same bits from any call.
  void GdnConvRows(int il, int64_t t0, int64_t t1, int64_t c0, const float* state, float* window,
                   CpuContext& ctx) const;
  void GdnOut(int il, int64_t r0, int64_t n, RowScratch& s, CpuContext& ctx) const;
  void AttentionIn(int il, int64_t r0, int64_t n, RowScratch& s, CpuContext& ctx) const;
  void AttentionCore(int il, int attention_index, std::span<const model::SequenceInput> seqs,
                     std::span<const SeqSpan> spans, CpuContext& ctx) const;
  void AttentionOut(int il, int64_t r0, int64_t n, RowScratch& s, CpuContext& ctx) const;
  // The GDN recurrence of a read-only denoise pass (docs/decoding.md) runs causally over the block
  // from the committed state, in scratch memory that is thrown away afterwards; this fills the
  // scratch. (The block's conv reads the committed conv state, GdnConvRows, and only a causal
  // pass advances it.) The official Clover file's diffusion-only GDN tensors (ssm_bd_*,
  // ssm_conv1d.weight_right) would plug in here and in GdnConvRows once their semantics are
  // published.
  static void GdnDenoiseState(const float* committed_ssm, int64_t ssm_floats, float* scratch_ssm);
  // Pieces of GdnCore and AttentionCore that a pipelined block runs on its own rows too:
  // tokens [t0, t1) of span sp (offsets from sp.row0).
  // Records the conv inputs and outputs, decays and write strengths of those tokens.
  void GdnRecordRows(const CpuState::Record& rec, const SeqSpan& sp, int64_t t0, int64_t t1,
                     CpuContext& ctx) const;
  // The delta rule's arguments for those tokens on `state`.
  kernels::GdnArgs GdnArgsFor(const SeqSpan& sp, float* state, int64_t t0, int64_t t1,
                              CpuContext& ctx) const;
  // A causal pass's conv state: the K-1 conv input rows before the span's end (oldest first).
  void AdvanceConvState(float* conv_state, const SeqSpan& sp, float* window, CpuContext& ctx) const;
  // Per-head q/k RMSNorm and rope of those tokens, their K and V rows into the cache.
  void AttentionPrologue(int il, int attention_index, CpuState& st, const SeqSpan& sp, int64_t t0,
                         int64_t t1, CpuContext& ctx) const;
  kernels::AttentionArgs AttentionArgsFor(int attention_index, CpuState& st, const SeqSpan& sp,
                                          bool causal, CpuContext& ctx) const;

  // Pipelined row blocks (pipeline.cc; docs/pass-cost-log.md, "Pipelined row blocks"): a row-split
  // pass of one sequence whose blocks each run every layer's In, Core and Out parts on their own
  // rows, on their own thread, from the In part of first_layer through the Core of the last
  // layer, meeting only where a Core mixes rows: a block's GDN recurrence continues from the
  // state the block before it left (and its first K-1 conv rows read that block's rows), and its
  // attention queries wait for the K/V rows they read. The same bits as the phase-by-phase pass.
  struct BlockParts {  // Run's row work, for a block of rows: In of il; Out of il, In of il + 1
    void* self;
    void (*in)(void* self, int il, int64_t r0, int64_t n, RowScratch& s);
    void (*out_in)(void* self, int il, int64_t r0, int64_t n, RowScratch& s);
    // The last layer's Out part on the block's kept rows, then their output norm and head rows
    // (PlanBlockTails).
    void (*tail)(void* self, int il, int64_t r0, int64_t n, RowScratch& s);
  };
  void RunPipelined(int first_layer, const model::SequenceInput& in, const SeqSpan& sp,
                    std::span<const int64_t> bounds, CpuContext& ctx,
                    const BlockParts& parts) const;
  void GdnBlockCore(int il, const model::SequenceInput& in, const SeqSpan& sp, int64_t r0,
                    int64_t n, int p, int n_blocks, int prev_gdn, CpuContext& ctx) const;
  void AttentionBlockCore(int il, const model::SequenceInput& in, const SeqSpan& sp, int64_t r0,
                          int64_t n, int p, int n_blocks, CpuContext& ctx) const;
  // Waits until block q has finished `stage`; throws PipelineAborted when another block failed.
  static void WaitForBlock(CpuContext& ctx, int q, int64_t stage);

  // The MoE block of rows [r0, r0 + n) into block_out; s.used marks the experts they selected.
  void MoeLayer(int il, int64_t r0, int64_t n, RowScratch& s, CpuContext& ctx) const;
  // The last layer's Out part and MoE run only on the rows whose final residual is read: rows
  // that get a logit row in this pass, and every row of a sequence whose further rows MoreLogits
  // may still compute (kAll, causal, no fused tail). The other rows' last-layer output feeds
  // nothing: the layer's Core already wrote their K/V and GDN state, and the Out part and the MoE
  // touch each row alone. Moves the kept rows' residual and Out inputs to rows [0, m) in order
  // (CompactOutInputs), fills out_row_ / keep_src_, and returns m. Same bits for every logit.
  int64_t KeepOutputRows(int il, std::span<const model::SequenceInput> seqs,
                         std::span<const SeqSpan> spans, CpuContext& ctx) const;
  // Moves row keep_src_[j] to row j (keep_src_ ascending, so a forward copy is safe), in
  // the buffers layer il's Out part reads: GDN o and z, or attention's output and gated q.
  // Rows [r0, r0 + m) only: r0 0 for a whole pass (KeepOutputRows), a block's first row for a
  // pipelined block (PlanBlockTails).
  void CompactOutInputs(int il, int64_t r0, int64_t m, CpuContext& ctx) const;
  // KeepOutputRows and Output's bookkeeping for a pipelined pass (one sequence), block by block:
  // each block's kept rows move to its own first rows (RowScratch::tail_kept), and its head rows
  // are numbered after the blocks before it (tail_head0, tail_heads; head_y_rows_), so that
  // each block runs the last layer's Out part and its head rows itself (BlockHead). Returns the
  // kept rows of all blocks. The bits of every logit are those of KeepOutputRows and Output.
  int64_t PlanBlockTails(const model::SequenceInput& in, const SeqSpan& span,
                         std::span<const int64_t> bounds, CpuContext& ctx) const;
  // The output norm and head rows of block `s` (PlanBlockTails), on the calling thread.
  void BlockHead(RowScratch& s, CpuContext& ctx) const;
  // Sequence s's logit rows in ctx (Output, PlanBlockTails, read by logits() and MoreLogits):
  // `count` rows from `offset`; `more`: MoreLogits may add rows later from its kept rows, which
  // start at out_row_[span.row0]. The second form: a batch slot without a sequence (no rows).
  static void NoteSeqLogits(CpuContext& ctx, size_t s, int64_t offset, int64_t count, bool more,
                            const SeqSpan& span);
  static void NoteSeqLogits(CpuContext& ctx, size_t s);
  void Output(std::span<const model::SequenceInput> seqs, std::span<const SeqSpan> spans,
              CpuContext& ctx) const;
  // The output head over `h` rows already normed into `normed` ([h][n_embd]), with the
  // activation scratch of block `s`: logits into their logit rows (y_rows, or rows 0..h-1 when
  // null).
  void Head(CpuContext& ctx, RowScratch& s, const float* normed, int64_t h,
            const int32_t* y_rows) const;
  kernels::Activations& Prepare(std::vector<kernels::Activations>& acts, GgmlType type,
                                const float* x, int64_t rows, int64_t n_in, int64_t ldx) const;
  /// One product of Project: rows of y (leading dimension ldy) = h x w^T.
  struct Projection {
    const kernels::Matrix* w;
    float* y;
    int64_t ldy;
  };
  /// The products of the normed input h [rows][n_embd] with several matrices in one parallel
  /// region (the GDN and attention input projections); each activation format is prepared once.
  void Project(RowScratch& s, const float* h, int64_t rows,
               std::initializer_list<Projection> ps) const;

  std::shared_ptr<const model::Model> model_;
  const model::Hparams& hp_;
  model::Weights w_;  // the model's views plus this executor's tile copies
  Logger logger_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<int> layer_slot_;  // il -> index among recurrent or attention layers
  // il -> the GDN layer's conv weights tap-major (kernels::ConvTapsMajor; empty for attention
  // layers): a conv call reads them as they are instead of transposing w per call.
  std::vector<std::vector<float>> conv_taps_;
  std::vector<kernels::ActFormat> formats_;  // activation formats any weight needs
  int row_parts_ = 1;
  bool pipelined_ = true;
};

}  // namespace crossword::backends::cpu
