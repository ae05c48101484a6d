// The CPU executor: construction (pool, tile copies), forward-context sizing, and the forward
// pass orchestration (embedding, layer loop, output head). The per-layer math is in layers.cc.
#include "backends/cpu/executor.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <utility>

#include "backends/cpu/repack.h"
#include "backends/cpu/state.h"
#include "base/error.h"
#include "base/memory_limit.h"
#include "core/quant.h"

namespace crossword::backends::cpu {

using model::LayerWeights;
using model::LogitRows;
using model::PassKind;
using model::SequenceInput;

namespace {
// Why a model file's pages cannot be replaced by its tile copies (RepackLimits), "" when they
// can or the weights come from no file.
std::string_view NoMappingReason(const gguf::File& f) {
  if (f.is_read_into_memory()) return "the model was read into memory (--no-mmap)";
  if (f.is_locked()) return "the model is locked in memory (--mlock)";
  return "";
}

// Whether MoreLogits may compute rows of sequence `in` after its pass: a causal pass with every
// logit row (a chunked verify reads its first rows, then asks for the rest).
bool MoreLogitsAllowed(const SequenceInput& in) {
  return in.logits == LogitRows::kAll && in.denoise_tail == 0 && in.kind == PassKind::kCausal;
}

// A sequence's logit rows [first, first + count) among its T rows.
std::pair<int64_t, int64_t> LogitSpan(const SequenceInput& in, int64_t T) {
  switch (in.logits) {
    case LogitRows::kAll:
      return {0, T};
    case LogitRows::kLast:
      return {T - 1, 1};
    case LogitRows::kNone:
      break;
  }
  return {T, 0};
}

// Whether token t of sequence `in` (T tokens) gets a head row in its pass: its logit rows
// (LogitRows), less the rows need_rows leaves out.
bool HeadRow(const SequenceInput& in, int64_t t, int64_t T) {
  switch (in.logits) {
    case LogitRows::kNone:
      return false;
    case LogitRows::kLast:
      return t == T - 1;
    case LogitRows::kAll:
      return in.need_rows.empty() || in.need_rows[static_cast<size_t>(t)] != 0;
  }
  return false;
}
}  // namespace

CpuExecutor::CpuExecutor(std::shared_ptr<const model::Model> model, const CpuOptions& options)
    : model_(std::move(model)),
      hp_(model_->hparams()),
      w_(model_->weights()),
      logger_(options.logger) {
  int threads = options.threads;
  if (threads < 0) Fail("cpu executor: --threads must be >= 0 (got {})", threads);
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  pool_ = std::make_unique<ThreadPool>(threads);
  if (options.repack) {
    // A container's limit, not the node's memory, is what the copies must fit in: sized from
    // physical memory they could overshoot it and get the process killed.
    const MemoryLimit limit = ProcessMemoryLimit();
    const size_t phys = limit.bytes;
    const size_t file = model_->file().file_size();
    const size_t budget = RepackAllowance(phys, file), cap = RepackCap(phys, file);
    if (limit.cgroup) {
      logger_.Info(
          "memory limit {:.1f} MiB ({}), below physical memory: the tile copies are "
          "sized to it",
          phys / 1048576.0, limit.source);
    }
    if (cap == 0) {
      logger_.Info(
          "no tile copies: the model file ({:.1f} MiB) would not leave an eighth of the memory "
          "limit ({:.1f} MiB) free, so its pages are read from the file as passes need them; "
          "copies, which cannot be paged out, would leave less room for them",
          file / 1048576.0, phys / 1048576.0);
    } else if (budget < phys / 4) {
      logger_.Info(
          "repack allowance {:.1f} MiB: memory {:.1f} MiB less the mapped file "
          "({:.1f} MiB) and a quarter kept free",
          budget / 1048576.0, phys / 1048576.0, file / 1048576.0);
    }
    if (cap > 0) {
      RepackWeights(w_,
                    {.max_added = budget,
                     .max_total = cap,
                     .file_mapping = model_->file().refaultable_bytes(),
                     .no_mapping_reason = NoMappingReason(model_->file()),
                     .first_layer = options.first_layer},
                    logger_, pool_.get());
    }
  } else {
    logger_.Info("weights not repacked (--no-repack): passes of 4+ rows repack tiles on the fly");
  }
  int n_rec = 0, n_att = 0;
  conv_taps_.resize(static_cast<size_t>(hp_.n_layer));
  for (int il = 0; il < hp_.n_layer; ++il) {
    layer_slot_.push_back(hp_.is_recurrent(il) ? n_rec++ : n_att++);
    if (hp_.is_recurrent(il) && il >= options.first_layer) {
      conv_taps_[static_cast<size_t>(il)] =
          kernels::ConvTapsMajor(w_.layers[il].ssm_conv1d, hp_.conv_dim(), hp_.ssm_d_conv);
    }
  }
  // Every activation format some matrix needs, so contexts reserve exactly those.
  auto add = [&](const kernels::Matrix& mat) {
    if (!mat.data) return;
    const kernels::ActFormat f = kernels::ActFormatFor(mat.type);
    if (std::find(formats_.begin(), formats_.end(), f) == formats_.end()) formats_.push_back(f);
  };
  add(w_.output);
  size_t max_layer_bytes = 0;
  for (const LayerWeights& L : w_.layers) {
    size_t bytes = 0;
    for (const kernels::Matrix* mat : L.DenseMatrices()) {
      add(*mat);
      bytes += static_cast<size_t>(mat->n_out) * mat->row_bytes;
    }
    for (const model::ExpertTensor* e : L.ExpertStacks()) {
      add(e->first);
      bytes += static_cast<size_t>(e->n_expert) * e->expert_stride;
    }
    max_layer_bytes = std::max(max_layer_bytes, bytes);
  }
  using RowSplit = CpuOptions::RowSplit;
  const bool rows =
      options.row_split == RowSplit::kRows ||
      (options.row_split == RowSplit::kAuto && max_layer_bytes <= kRowSplitMaxLayerBytes);
  row_parts_ = rows ? std::min(pool_->size(), kMaxRowParts) : 1;
  pipelined_ = options.pipelined;
  if (rows && pool_->size() > 1) {
    logger_.Info("multi-row passes split by rows across {} threads (largest layer {:.2f} MiB)",
                 row_parts_, max_layer_bytes / 1048576.0);
  }
}

std::string CpuExecutor::Describe() const {
  return fmt::format("CPU {}{}", kernels::CurrentTargetName(), repacked() ? " tiles" : "");
}

std::unique_ptr<model::SequenceState> CpuExecutor::NewState(
    const model::StateOptions& options) const {
  return std::make_unique<CpuState>(*this, hp_, options, *pool_);
}

std::unique_ptr<model::ForwardContext> CpuExecutor::NewContext(
    const model::ContextOptions& options) const {
  return std::make_unique<CpuContext>(*this, options);
}

CpuContext::CpuContext(const CpuExecutor& executor, const model::ContextOptions& options)
    : model::ForwardContext(executor, options) {
  const model::Hparams& hp = executor.hparams();
  if (options.max_tokens < 1 || options.max_seqs < 1 || options.max_logit_rows < 1) {
    Fail("forward context: max_tokens, max_seqs and max_logit_rows must be >= 1");
  }
  const int64_t T = options.max_tokens;
  const int64_t k = hp.n_expert_used;
  const int64_t n_ff = std::max(hp.n_ff_exp, hp.n_ff_shexp);
  const int64_t q_dim = static_cast<int64_t>(hp.n_head) * hp.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(hp.n_head_kv) * hp.head_dim;
  const int64_t logit_rows = options.max_logit_rows;
  n_vocab_ = hp.n_vocab;
  size_t off = 0;
  auto take = [&off](int64_t n) {
    const size_t at = off;
    off += (static_cast<size_t>(n) + 15) & ~size_t{15};  // 64-byte aligned chunks
    return at;
  };
  at_.residual = take(T * hp.n_embd);
  at_.normed = take(T * hp.n_embd);
  at_.block_out = take(T * hp.n_embd);
  at_.gdn_qkv = take(T * hp.conv_dim());
  at_.gdn_z = take(T * hp.ssm_d_inner);
  at_.gdn_beta_alpha = take(T * 2 * hp.ssm_n_v_heads);
  at_.gdn_conv = take(T * hp.conv_dim());
  at_.gdn_out = take(T * hp.ssm_d_inner);
  at_.gdn_decay = take(T * hp.ssm_n_v_heads);
  at_.gdn_beta = take(T * hp.ssm_n_v_heads);
  at_.attn_q_gate = take(T * 2 * q_dim);
  at_.attn_k = take(T * kv_dim);
  at_.attn_v = take(T * kv_dim);
  at_.attn_out = take(T * q_dim);
  at_.router_logits = take(T * hp.n_expert);
  at_.expert_weights = take(T * k);
  at_.expert_gate = take(T * (k + 1) * n_ff);
  at_.expert_up = take(T * (k + 1) * n_ff);
  at_.expert_down = take(T * k * hp.n_embd);
  at_.shared_down = take(T * hp.n_embd);
  at_.output_normed = take(logit_rows * hp.n_embd);
  at_.logits = take(logit_rows * hp.n_vocab);
  gdn_scratch_floats_ = static_cast<int64_t>(hp.ssm_n_v_heads) * hp.ssm_d_state * hp.ssm_d_state;
  at_.gdn_scratch = take(options.max_seqs * gdn_scratch_floats_);
  f_.assign(off, 0.0f);

  size_t ioff = 0;
  auto itake = [&ioff](int64_t n) {
    const size_t at = ioff;
    ioff += static_cast<size_t>(n);
    return at;
  };
  at_.expert_ids = itake(T * k);
  at_.rows_x = itake(T * k);
  at_.rows_y = itake(T * k);
  i_.assign(ioff, 0);

  // Part 0 runs whole passes (and the head: up to R rows); the others only row blocks of
  // row-split passes (docs/pass-cost-log.md, "Row-split passes"): the second of two blocks up to
  // 3/4 of T, and with 3+ blocks (an even split) at most ceil(T / 3) each.
  const int64_t main_in = std::max({hp.n_embd, hp.ssm_d_inner, q_dim, hp.n_ff_shexp});
  parts_.resize(static_cast<size_t>(executor.row_parts()));
  for (size_t p = 0; p < parts_.size(); ++p) {
    RowScratch& s = parts_[p];
    const int64_t rows = p == 0 ? T : p == 1 ? T - T / 4 : (T + 2) / 3;
    s.acts_main.resize(5);
    s.acts_ff.resize(5);
    for (kernels::ActFormat f : executor.activation_formats()) {
      s.acts_main[static_cast<int>(f)].Reserve(p == 0 ? std::max(T, logit_rows) : rows, main_in);
      s.acts_ff[static_cast<int>(f)].Reserve(rows * k, hp.n_ff_exp);
    }
    s.jobs.reserve(2 * static_cast<size_t>(hp.n_expert) + 4);
    s.counts.assign(static_cast<size_t>(hp.n_expert), 0);
    s.offsets.assign(static_cast<size_t>(hp.n_expert) + 1, 0);
    s.used.assign(static_cast<size_t>(hp.n_expert), 0);
    s.conv_window.assign(static_cast<size_t>(std::max(0, hp.ssm_d_conv - 1) * hp.conv_dim()), 0.0f);
    s.used_by_layer.assign(static_cast<size_t>(hp.n_layer) * static_cast<size_t>(hp.n_expert), 0);
  }
  seq_logit_offset_.assign(options.max_seqs, 0);
  seq_logit_count_.assign(options.max_seqs, 0);
  seq_row0_.assign(options.max_seqs, 0);
  seq_more_ok_.assign(options.max_seqs, 0);
  head_y_rows_.assign(static_cast<size_t>(logit_rows), 0);
  out_row_.assign(static_cast<size_t>(T), -1);
  keep_src_.assign(static_cast<size_t>(T), 0);
  anchor_row_.assign(static_cast<size_t>(T), -1);
  anchor_n_.assign(static_cast<size_t>(T), 0);
  skip_ffn_.assign(static_cast<size_t>(T), 0);
}

void CpuContext::set_row_block_cost(int part, double seconds_per_row) {
  Check(part >= 0 && part < static_cast<int>(parts_.size()) && seconds_per_row > 0.0,
        "set_row_block_cost: no row block {} or a cost <= 0", part);
  parts_[static_cast<size_t>(part)].cost = seconds_per_row;
}

int64_t CpuContext::n_logit_rows(int s) const {
  if (s < 0 || s >= static_cast<int>(seq_logit_count_.size()))
    Fail("logits: no sequence {} in the last pass", s);
  return seq_logit_count_[s];
}

std::span<const float> CpuContext::logits(int s) const {
  if (s < 0 || s >= static_cast<int>(seq_logit_count_.size()))
    Fail("logits: no sequence {} in the last pass", s);
  const float* base = f_.data() + at_.logits;
  return {base + seq_logit_offset_[s] * n_vocab_,
          static_cast<size_t>(seq_logit_count_[s] * n_vocab_)};
}

kernels::Activations& CpuExecutor::Prepare(std::vector<kernels::Activations>& acts, GgmlType type,
                                           const float* x, int64_t rows, int64_t n_in,
                                           int64_t ldx) const {
  kernels::Activations& a = acts[static_cast<int>(kernels::ActFormatFor(type))];
  kernels::PrepareActivations(type, x, rows, n_in, ldx, a, *pool_);
  return a;
}

void CpuExecutor::EmbedTokens(std::span<const SequenceInput> seqs, CpuContext& ctx) const {
  float* x = ctx.F(ctx.at_.residual);
  int64_t row = 0;
  for (const SequenceInput& in : seqs) {
    for (int32_t tok : in.tokens) {
      const std::byte* src = w_.token_embd + static_cast<size_t>(tok) * w_.token_embd_row_bytes;
      DequantizeRow(w_.token_embd_type, src, x + row * hp_.n_embd, hp_.n_embd);
      ++row;
    }
  }
}

void CpuExecutor::Forward(std::span<const SequenceInput> seqs, model::ForwardContext& ctx,
                          model::ForwardObserver* observer) const {
  Run(seqs, ctx, observer, 0, nullptr);
}

void CpuExecutor::ForwardFrom(int first_layer, const float* residual,
                              std::span<const SequenceInput> seqs,
                              model::ForwardContext& ctx) const {
  Check(first_layer >= 0 && first_layer <= hp_.n_layer && residual != nullptr,
        "ForwardFrom: layer {} outside [0, {}] or no hidden state", first_layer, hp_.n_layer);
  Run(seqs, ctx, nullptr, first_layer, residual);
}

void CpuExecutor::Run(std::span<const SequenceInput> seqs, model::ForwardContext& base_ctx,
                      model::ForwardObserver* observer, int first_layer,
                      const float* residual) const {
  // Validate everything before any state changes (the executor check makes the casts safe).
  model::ValidateBatch(*this, seqs, base_ctx);
  CpuContext& ctx = static_cast<CpuContext&>(base_ctx);
  std::array<SeqSpan, 64> span_storage;
  std::vector<SeqSpan> span_heap;  // only for > 64 sequences (a configuration choice, not per pass)
  SeqSpan* spans = span_storage.data();
  if (seqs.size() > span_storage.size()) {
    span_heap.resize(seqs.size());
    spans = span_heap.data();
  }
  int64_t total = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t T = static_cast<int64_t>(seqs[s].tokens.size());
    spans[s] = SeqSpan{total, T, seqs[s].state->n_past(), static_cast<int64_t>(s)};
    total += T;
  }
  const std::span<const SeqSpan> sp(spans, seqs.size());
  // The layers see a fused sequence (denoise_tail > 0) as two parts in order: its causal tokens,
  // which commit (and record) as a causal pass of their own, then its tail as a denoise pass
  // from the state they leave. Rows are computed independently of the batch (kernels), so each
  // part gets the bits of the separate pass.
  std::array<SequenceInput, 128> part_storage;
  std::array<SeqSpan, 128> part_span_storage;
  std::vector<SequenceInput> part_heap;  // only for > 64 sequences
  std::vector<SeqSpan> part_span_heap;
  SequenceInput* parts = part_storage.data();
  SeqSpan* part_spans = part_span_storage.data();
  if (2 * seqs.size() > part_storage.size()) {
    part_heap.resize(2 * seqs.size());
    part_span_heap.resize(2 * seqs.size());
    parts = part_heap.data();
    part_spans = part_span_heap.data();
  }
  size_t n_parts = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SequenceInput& in = seqs[s];
    const int64_t tail = in.denoise_tail;
    const int64_t causal = sp[s].T - tail;
    parts[n_parts] = in;
    parts[n_parts].tokens = in.tokens.first(static_cast<size_t>(causal));
    parts[n_parts].denoise_tail = 0;
    part_spans[n_parts++] = SeqSpan{sp[s].row0, causal, sp[s].n_past, sp[s].seq};
    if (tail == 0) continue;
    SequenceInput d;
    d.state = in.state;
    d.tokens = in.tokens.subspan(static_cast<size_t>(causal));
    d.kind = PassKind::kDenoise;
    parts[n_parts] = d;
    part_spans[n_parts++] = SeqSpan{sp[s].row0 + causal, tail, sp[s].n_past + causal, sp[s].seq};
  }
  const std::span<const SequenceInput> lp(parts, n_parts);
  const std::span<const SeqSpan> lsp(part_spans, n_parts);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t n = std::min<int64_t>(seqs[s].expert_anchor_rows, sp[s].T);
    for (int64_t t = 0; t < sp[s].T; ++t) {
      const size_t row = static_cast<size_t>(sp[s].row0 + t);
      ctx.anchor_row_[row] = n > 0 && t >= n ? static_cast<int32_t>(sp[s].row0) : -1;
      ctx.anchor_n_[row] = static_cast<int32_t>(n);
      ctx.skip_ffn_[row] = seqs[s].skip_ffn_layers;
    }
  }
  ctx.mutable_counters() = model::PassCounters{};
  for (int64_t t = 0; t < total; ++t)
    ctx.out_row_[static_cast<size_t>(t)] = static_cast<int32_t>(t);

  const int64_t E = hp_.n_embd;
  // Named intermediates (docs/model.md, "Named intermediates"): [total][E] unless stated.
  auto emit = [observer](std::string_view name, int layer, const float* data, int64_t rows,
                         int64_t cols) {
    if (observer && observer->Wants(name, layer))
      observer->OnTensor(model::TensorView{name, layer, rows, cols, data});
  };
  if (residual) {
    std::memcpy(ctx.F(ctx.at_.residual), residual, sizeof(float) * total * hp_.n_embd);
  } else {
    EmbedTokens(seqs, ctx);
  }
  float* x = ctx.F(ctx.at_.residual);
  float* h = ctx.F(ctx.at_.normed);
  float* cur = ctx.F(ctx.at_.block_out);
  emit("inp_embd", -1, x, total, E);
  // Row blocks (CpuOptions::RowSplit): the layers' row-independent parts run as n_blocks blocks
  // side by side, the parts that mix rows (conv, recurrence, attention) over the whole batch.
  // Not with an observer (it sees whole tensors) or expert anchors (a mask row reads its anchor
  // rows' routing), and only with kMinRowsPerBlock rows per block: fewer do not pay the hand-off.
  // Pipelined row blocks (RunPipelined: one sequence without a fused tail) meet only where a
  // layer mixes rows, so blocks of kMinPipelinedRows pay (bench --sweep, 2 threads: verify8
  // 0.36 -> 0.26 ms in 8 rotated rounds); a block also holds the conv window's K-1 rows, so
  // that its first conv rows read only the block before it.
  constexpr int64_t kMinRowsPerBlock = 8;
  constexpr int64_t kMinPipelinedRows = 4;
  bool anchors = false;
  for (const SequenceInput& in : seqs) anchors |= in.expert_anchor_rows > 0;
  const bool may_pipeline =
      pipelined_ && seqs.size() == 1 && n_parts == 1 && first_layer < hp_.n_layer;
  const int64_t min_rows =
      may_pipeline ? std::max<int64_t>(kMinPipelinedRows, hp_.ssm_d_conv - 1) : kMinRowsPerBlock;
  int64_t n_blocks = 1;
  // Block p takes rows [bound[p], bound[p + 1]) of the `rows` a row phase runs (every row of
  // the pass; the last layer's kept rows). Two blocks share the rows in inverse
  // proportion to their measured time per row (RowScratch::cost; within [1/4, 3/4] of the rows):
  // the worker's block reads rows the calling thread wrote in the parts that mix rows, which
  // takes longer when the two cores share no cache, so equal blocks would wait for it. More
  // blocks split evenly. Any partition gives the same bits.
  std::array<int64_t, kMaxRowParts + 1> bound{};
  auto split_rows = [&](int64_t rows, int64_t min_block) {
    n_blocks = observer || anchors ? 1 : std::clamp<int64_t>(rows / min_block, 1, row_parts_);
    for (int64_t p = 0; p <= n_blocks; ++p) bound[p] = p * rows / n_blocks;
    if (n_blocks == 2 && ctx.parts_[0].cost > 0.0 && ctx.parts_[1].cost > 0.0) {
      const double share0 = ctx.parts_[1].cost / (ctx.parts_[0].cost + ctx.parts_[1].cost);
      bound[1] = std::clamp<int64_t>(std::llround(share0 * static_cast<double>(rows)), rows / 4,
                                     rows - rows / 4);
    }
  };
  split_rows(total, min_rows);
  auto rows_phase = [&](auto&& fn) {
    const int64_t rows = bound[n_blocks];
    if (n_blocks == 1) return fn(int64_t{0}, rows, ctx.parts_[0]);
    pool_->RunOnEachThread([&](int p) {
      if (p >= n_blocks) return;
      RowScratch& s = ctx.parts_[static_cast<size_t>(p)];
      const auto start = std::chrono::steady_clock::now();
      fn(bound[p], bound[p + 1] - bound[p], s);
      s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
    for (int64_t p = 0; p < n_blocks; ++p) {
      RowScratch& s = ctx.parts_[static_cast<size_t>(p)];
      const double per_row = s.seconds / static_cast<double>(bound[p + 1] - bound[p]);
      s.cost = s.cost == 0.0 ? per_row : 0.8 * s.cost + 0.2 * per_row;
    }
  };
  // A layer's row-independent work before its conv/recurrence or attention (In), and after it
  // (Out, then the MoE). The Out part of layer il and the In part of layer il + 1 run in one
  // row phase: one hand-off fewer per layer.
  auto layer_in = [&](int il, int64_t r0, int64_t n, RowScratch& s) {
    const LayerWeights& L = w_.layers[il];
    for (int64_t t = r0; t < r0 + n; ++t)
      kernels::RmsNorm(x + t * E, L.attn_norm.data(), h + t * E, E, hp_.rms_eps);
    emit("attn_norm", il, h, total, E);
    if (L.is_recurrent()) {
      GdnIn(il, r0, n, s, ctx, seqs, sp);
    } else {
      AttentionIn(il, r0, n, s, ctx);
    }
  };
  auto layer_out = [&](int il, int64_t r0, int64_t n, RowScratch& s) {
    const LayerWeights& L = w_.layers[il];
    if (L.is_recurrent()) {
      GdnOut(il, r0, n, s, ctx);
    } else {
      AttentionOut(il, r0, n, s, ctx);
    }
    emit(L.is_recurrent() ? "gdn_out" : "attn_out", il, cur, total, E);
    kernels::Add(x + r0 * E, cur + r0 * E, x + r0 * E, n * E);
    emit("ffn_inp", il, x, total, E);
    // FFN blocks skipped (SequenceInput::skip_ffn_layers; never in the last layer, whose rows
    // may be compacted): rows whose sequence skips this layer's keep their residual. A block of
    // such rows runs neither the FFN norm nor the MoE; a block that mixes them with others runs
    // both on all and adds to the others only (a row's result never depends on its block).
    const uint64_t bit =
        il < 64 ? model::SkippableFfnLayers(hp_.n_layer) & (uint64_t{1} << il) : uint64_t{0};
    int64_t n_skip = 0;
    if (bit != 0) {
      for (int64_t t = r0; t < r0 + n; ++t)
        n_skip += (ctx.skip_ffn_[static_cast<size_t>(t)] & bit) != 0;
    }
    if (n_skip == n) {
      std::fill(s.used.begin(), s.used.end(), uint8_t{0});  // no expert read
      emit("l_out", il, x, total, E);
      return;
    }
    for (int64_t t = r0; t < r0 + n; ++t)
      kernels::RmsNorm(x + t * E, L.post_attention_norm.data(), h + t * E, E, hp_.rms_eps);
    emit("ffn_norm", il, h, total, E);
    MoeLayer(il, r0, n, s, ctx);
    emit("ffn_out", il, cur, total, E);
    if (n_skip == 0) {
      kernels::Add(x + r0 * E, cur + r0 * E, x + r0 * E, n * E);
    } else {
      for (int64_t t = r0; t < r0 + n; ++t) {
        if ((ctx.skip_ffn_[static_cast<size_t>(t)] & bit) == 0)
          kernels::Add(x + t * E, cur + t * E, x + t * E, E);
      }
    }
    emit("l_out", il, x, total, E);
  };
  // A layer's MoE, counted: its distinct experts over all blocks (PassCounters::experts_used),
  // `flags(block scratch)` pointing at the n_expert used-flags of the layer.
  auto count_experts = [&](auto flags) {
    for (int e = 0; e < hp_.n_expert; ++e) {
      bool used = false;
      for (int64_t p = 0; p < n_blocks; ++p) used |= flags(ctx.parts_[static_cast<size_t>(p)])[e];
      ctx.mutable_counters().experts_used += used;
    }
    ++ctx.mutable_counters().moe_layers;
  };
  // Pipelined row blocks (RunPipelined): one sequence without a fused tail, blocks of equal rows;
  // they run every layer up to the last one's Core, whose Out part runs below on its kept rows.
  const bool pipelined = may_pipeline && n_blocks >= 2;
  int il0 = first_layer;
  if (pipelined) {
    for (int64_t p = 0; p <= n_blocks; ++p) bound[p] = p * total / n_blocks;
    auto in_fn = [&](int il, int64_t r0, int64_t n, RowScratch& s) { layer_in(il, r0, n, s); };
    auto out_in_fn = [&](int il, int64_t r0, int64_t n, RowScratch& s) {
      layer_out(il, r0, n, s);
      layer_in(il + 1, r0, n, s);
    };
    // The last layer's Out part and the head rows, each block its own (PlanBlockTails): the
    // first block starts its head while the others finish the layer, and no hand-off follows.
    auto tail_fn = [&](int il, int64_t r0, int64_t, RowScratch& s) {
      if (s.tail_kept > 0) {
        CompactOutInputs(il, r0, s.tail_kept, ctx);
        layer_out(il, r0, s.tail_kept, s);
      } else {
        std::fill(s.used.begin(), s.used.end(), uint8_t{0});  // no MoE ran
      }
      BlockHead(s, ctx);
    };
    struct Fns {
      decltype(in_fn)* in;
      decltype(out_in_fn)* out_in;
      decltype(tail_fn)* tail;
    } fns{&in_fn, &out_in_fn, &tail_fn};
    const BlockParts parts{&fns,
                           [](void* f, int il, int64_t r0, int64_t n, RowScratch& s) {
                             (*static_cast<Fns*>(f)->in)(il, r0, n, s);
                           },
                           [](void* f, int il, int64_t r0, int64_t n, RowScratch& s) {
                             (*static_cast<Fns*>(f)->out_in)(il, r0, n, s);
                           },
                           [](void* f, int il, int64_t r0, int64_t n, RowScratch& s) {
                             (*static_cast<Fns*>(f)->tail)(il, r0, n, s);
                           }};
    const std::span<const int64_t> bounds(bound.data(), static_cast<size_t>(n_blocks) + 1);
    const int64_t kept = PlanBlockTails(lp[0], lsp[0], bounds, ctx);
    RunPipelined(first_layer, lp[0], lsp[0], bounds, ctx, parts);
    for (int il = first_layer; il + 1 < hp_.n_layer; ++il) {
      count_experts([&](const RowScratch& s) {
        return s.used_by_layer.data() + static_cast<size_t>(il) * hp_.n_expert;
      });
    }
    ctx.mutable_counters().last_layer_rows = kept;
    if (kept > 0) {
      count_experts([](const RowScratch& s) { return s.used.data(); });
    } else {
      ++ctx.mutable_counters().moe_layers;  // as a pass whose last layer keeps no row
    }
    il0 = hp_.n_layer;  // every layer and the head ran in the blocks
  } else if (first_layer < hp_.n_layer) {
    rows_phase([&](int64_t r0, int64_t n, RowScratch& s) { layer_in(first_layer, r0, n, s); });
  }
  for (int il = il0; il < hp_.n_layer; ++il) {
    if (pipelined) {
      // The last layer's Core ran in the pipeline.
    } else if (w_.layers[il].is_recurrent()) {
      GdnCore(il, layer_slot_[il], lp, lsp, ctx, seqs, sp,
              std::span<const int64_t>(bound.data(), static_cast<size_t>(n_blocks) + 1));
    } else {
      AttentionCore(il, layer_slot_[il], lp, lsp, ctx);
    }
    // The last layer: only the rows whose output is read (KeepOutputRows), moved to the front.
    // Not with an observer (it sees whole tensors) or expert anchors (anchor rows' routing).
    if (il + 1 == hp_.n_layer) ctx.mutable_counters().last_layer_rows = total;
    if (il + 1 == hp_.n_layer && !observer && !anchors) {
      const int64_t kept = KeepOutputRows(il, seqs, sp, ctx);
      ctx.mutable_counters().last_layer_rows = kept;
      if (kept < total) split_rows(kept, kMinRowsPerBlock);  // a row phase: one hand-off
      if (kept == 0) {  // no row's output is read (a prefill chunk): no MoE ran
        ++ctx.mutable_counters().moe_layers;
        continue;
      }
    }
    rows_phase([&](int64_t r0, int64_t n, RowScratch& s) {
      layer_out(il, r0, n, s);
      if (il + 1 < hp_.n_layer) layer_in(il + 1, r0, n, s);
    });
    count_experts([](const RowScratch& s) { return s.used.data(); });
  }
  if (!pipelined) Output(seqs, sp, ctx);
  if (observer) {
    int64_t rows = 0;
    for (size_t s = 0; s < seqs.size(); ++s) rows += ctx.seq_logit_count_[s];
    emit("result_norm", -1, ctx.F(ctx.at_.output_normed), ctx.head_rows(), E);
    emit("result_output", -1, ctx.F(ctx.at_.logits), rows, hp_.n_vocab);
  }
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (seqs[s].kind == PassKind::kCausal)
      seqs[s].state->Advance(sp[s].T - seqs[s].denoise_tail, seqs[s].record);
  }
}

int64_t CpuExecutor::KeepOutputRows(int il, std::span<const SequenceInput> seqs,
                                    std::span<const SeqSpan> spans, CpuContext& ctx) const {
  int32_t* out_row = ctx.out_row_.data();
  int32_t* src = ctx.keep_src_.data();
  int64_t m = 0, total = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SequenceInput& in = seqs[s];
    const SeqSpan& span = spans[s];
    total += span.T;
    const bool more = MoreLogitsAllowed(in);
    for (int64_t t = 0; t < span.T; ++t) {
      const bool keep = more || HeadRow(in, t, span.T);
      const int64_t row = span.row0 + t;
      out_row[row] = keep ? static_cast<int32_t>(m) : -1;
      if (keep) src[m++] = static_cast<int32_t>(row);
    }
  }
  if (m < total) CompactOutInputs(il, 0, m, ctx);
  return m;
}

int64_t CpuExecutor::PlanBlockTails(const SequenceInput& in, const SeqSpan& span,
                                    std::span<const int64_t> bounds, CpuContext& ctx) const {
  const auto [first, count] = LogitSpan(in, span.T);  // as Output numbers them
  const bool more = MoreLogitsAllowed(in);
  int32_t* out_row = ctx.out_row_.data();
  int32_t* src = ctx.keep_src_.data();
  int32_t* y_rows = ctx.head_y_rows_.data();
  int64_t kept = 0, h = 0;
  for (size_t p = 0; p + 1 < bounds.size(); ++p) {
    RowScratch& s = ctx.parts_[p];
    const int64_t r0 = bounds[p];
    int64_t m = 0;
    s.tail_head0 = h;
    s.tail_y0 = span.row0 + first;
    for (int64_t row = r0; row < bounds[p + 1]; ++row) {
      const int64_t t = row - span.row0;
      const bool head = t >= first && HeadRow(in, t, span.T);
      const bool keep = more || head;
      out_row[row] = keep ? static_cast<int32_t>(r0 + m) : -1;
      if (keep) src[r0 + m++] = static_cast<int32_t>(row);
      if (head) y_rows[h++] = static_cast<int32_t>(t - first);
    }
    s.tail_kept = m;
    s.tail_heads = h - s.tail_head0;
    kept += m;
  }
  NoteSeqLogits(ctx, 0, 0, count, more, span);
  for (size_t s = 1; s < ctx.seq_logit_count_.size(); ++s) NoteSeqLogits(ctx, s);
  ctx.mutable_counters().head_rows = h;
  return kept;
}

void CpuExecutor::NoteSeqLogits(CpuContext& ctx, size_t s, int64_t offset, int64_t count, bool more,
                                const SeqSpan& span) {
  ctx.seq_logit_offset_[s] = offset;
  ctx.seq_logit_count_[s] = count;
  ctx.seq_more_ok_[s] = more;
  // The rows of such a sequence are all kept, in order: they start at out_row_[row0].
  ctx.seq_row0_[s] = more ? ctx.out_row_[static_cast<size_t>(span.row0)] : -1;
}

void CpuExecutor::NoteSeqLogits(CpuContext& ctx, size_t s) {
  ctx.seq_logit_count_[s] = 0;
  ctx.seq_more_ok_[s] = 0;
}

void CpuExecutor::BlockHead(RowScratch& s, CpuContext& ctx) const {
  if (s.tail_heads == 0) return;
  const int64_t E = hp_.n_embd;
  const float* x = ctx.F(ctx.at_.residual);
  float* outh = ctx.F(ctx.at_.output_normed) + s.tail_head0 * E;
  const int32_t* y_rows = ctx.head_y_rows_.data() + s.tail_head0;
  for (int64_t i = 0; i < s.tail_heads; ++i) {
    const int32_t row = ctx.out_row_[static_cast<size_t>(s.tail_y0 + y_rows[i])];
    kernels::RmsNorm(x + row * E, w_.output_norm.data(), outh + i * E, E, hp_.rms_eps);
  }
  Head(ctx, s, outh, s.tail_heads, y_rows);  // in a block: on this thread (MatMul runs inline)
}

void CpuExecutor::Output(std::span<const SequenceInput> seqs, std::span<const SeqSpan> spans,
                         CpuContext& ctx) const {
  const int64_t E = hp_.n_embd;
  const float* x = ctx.F(ctx.at_.residual);
  float* outh = ctx.F(ctx.at_.output_normed);
  int32_t* y_rows = ctx.head_y_rows_.data();
  int64_t n = 0, h = 0;  // logit rows, head rows
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SeqSpan& span = spans[s];
    const auto [first, count] = LogitSpan(seqs[s], span.T);
    NoteSeqLogits(ctx, s, n, count, MoreLogitsAllowed(seqs[s]), span);
    for (int64_t i = 0; i < count; ++i) {
      if (!HeadRow(seqs[s], first + i, span.T)) continue;
      const int32_t row = ctx.out_row_[static_cast<size_t>(span.row0 + first + i)];
      kernels::RmsNorm(x + row * E, w_.output_norm.data(), outh + h * E, E, hp_.rms_eps);
      y_rows[h++] = static_cast<int32_t>(n + i);
    }
    n += count;
  }
  for (size_t s = seqs.size(); s < ctx.seq_logit_count_.size(); ++s) NoteSeqLogits(ctx, s);
  ctx.mutable_counters().head_rows = h;
  Head(ctx, ctx.parts_[0], outh, h, h == n ? nullptr : y_rows);
}

void CpuExecutor::Head(CpuContext& ctx, RowScratch& s, const float* normed, int64_t h,
                       const int32_t* y_rows) const {
  if (h == 0) return;
  // One product over the rows that need logits, scattered to their logit rows.
  kernels::Activations& a = Prepare(s.acts_main, w_.output.type, normed, h, hp_.n_embd, hp_.n_embd);
  kernels::MatMulJob job;
  job.w = w_.output;
  job.x = &a;
  job.n_rows = h;
  job.y = ctx.F(ctx.at_.logits);
  job.ldy = hp_.n_vocab;
  job.y_rows = y_rows;
  kernels::MatMul({&job, 1}, *pool_);
}

void CpuExecutor::MoreLogits(model::ForwardContext& base_ctx, int s, int64_t begin,
                             int64_t end) const {
  if (&base_ctx.executor() != this) Fail("MoreLogits: the context belongs to another executor");
  CpuContext& ctx = static_cast<CpuContext&>(base_ctx);
  if (s < 0 || s >= static_cast<int>(ctx.seq_logit_count_.size()) || ctx.seq_logit_count_[s] == 0) {
    Fail("MoreLogits: no sequence {} with logit rows in the last pass", s);
  }
  if (!ctx.seq_more_ok_[s]) {
    Fail(
        "MoreLogits: sequence {} of the last pass was not a causal LogitRows::kAll pass without "
        "a fused tail",
        s);
  }
  const int64_t count = ctx.seq_logit_count_[s];
  if (begin < 0 || begin >= end || end > count) {
    Fail("MoreLogits: rows [{}, {}) outside the sequence's {} logit rows", begin, end, count);
  }
  // The residual stream still holds the last layer's output of every row of the pass (the next
  // Forward overwrites it), so these rows get exactly the values the pass would have given them.
  const int64_t E = hp_.n_embd;
  const float* x = ctx.F(ctx.at_.residual) + ctx.seq_row0_[s] * E;
  float* outh = ctx.F(ctx.at_.output_normed);
  int32_t* y_rows = ctx.head_y_rows_.data();
  const int64_t h = end - begin;
  for (int64_t i = 0; i < h; ++i) {
    kernels::RmsNorm(x + (begin + i) * E, w_.output_norm.data(), outh + i * E, E, hp_.rms_eps);
    y_rows[i] = static_cast<int32_t>(ctx.seq_logit_offset_[s] + begin + i);
  }
  ctx.mutable_counters().head_rows += h;
  Head(ctx, ctx.parts_[0], outh, h, y_rows);
}

}  // namespace crossword::backends::cpu
