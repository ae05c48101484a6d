// Model loading, forward-context sizing, and the forward pass orchestration (embedding, layer
// loop, output head). The per-layer math is in layers.cc.
#include "model/model.h"

#include <unistd.h>  // sysconf: physical memory for the repack budget

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "core/quant.h"

namespace crossword::model {

std::unique_ptr<Model> Model::Load(const std::string& path, const LoadOptions& options) {
  return FromFile(gguf::File::Open(path, options.map), options);
}

std::unique_ptr<Model> Model::FromFile(gguf::File file, const LoadOptions& options) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::make_unique<gguf::File>(std::move(file));
  m->logger_ = options.logger;
  m->hp_ = ReadHparams(*m->file_, m->logger_);
  m->w_ = LoadWeights(*m->file_, m->hp_, m->logger_);
  if (options.repack) {
    // A quarter of physical memory: a copy that large still leaves room for the mapping itself.
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const size_t budget =
        pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) / 4 : 0;
    RepackWeights(m->w_, budget, m->logger_, options.pool);
  } else {
    m->logger_.Info(
        "weights not repacked (--no-repack): passes of 4+ rows repack Q8_0/Q4_0 tiles on the fly");
  }
  int n_rec = 0, n_att = 0;
  for (int il = 0; il < m->hp_.n_layer; ++il)
    m->layer_slot_.push_back(m->hp_.recurrent[il] ? n_rec++ : n_att++);
  // Every activation format some matrix needs, so contexts reserve exactly those.
  auto add = [&](const kernels::Matrix& mat) {
    if (!mat.data) return;
    const kernels::ActFormat f = kernels::ActFormatFor(mat.type);
    if (std::find(m->formats_.begin(), m->formats_.end(), f) == m->formats_.end())
      m->formats_.push_back(f);
  };
  add(m->w_.output);
  for (const LayerWeights& L : m->w_.layers) {
    for (const kernels::Matrix* mat : L.DenseMatrices()) add(*mat);
    for (const ExpertTensor* e : L.ExpertStacks()) add(e->first);
  }
  return m;
}

std::unique_ptr<SequenceState> Model::NewState(const StateOptions& options) const {
  return std::make_unique<SequenceState>(hp_, options);
}

ForwardContext::ForwardContext(const Model& model, const ContextOptions& options)
    : options_(options) {
  const Hparams& hp = model.hparams();
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
  at_.x = take(T * hp.n_embd);
  at_.h = take(T * hp.n_embd);
  at_.cur = take(T * hp.n_embd);
  at_.qkv = take(T * hp.conv_dim());
  at_.z = take(T * hp.ssm_d_inner);
  at_.ab = take(T * 2 * hp.ssm_n_v_heads);
  at_.conv = take(T * hp.conv_dim());
  at_.o = take(T * hp.ssm_d_inner);
  at_.g = take(T * hp.ssm_n_v_heads);
  at_.beta = take(T * hp.ssm_n_v_heads);
  at_.qg = take(T * 2 * q_dim);
  at_.kk = take(T * kv_dim);
  at_.vv = take(T * kv_dim);
  at_.ao = take(T * q_dim);
  at_.router = take(T * hp.n_expert);
  at_.topk_w = take(T * k);
  at_.hg = take(T * (k + 1) * n_ff);
  at_.hu = take(T * (k + 1) * n_ff);
  at_.down = take(T * k * hp.n_embd);
  at_.sh = take(T * hp.n_embd);
  at_.outh = take(logit_rows * hp.n_embd);
  at_.logits = take(logit_rows * hp.n_vocab);
  gdn_scratch_floats_ = static_cast<int64_t>(hp.ssm_d_conv - 1) * hp.conv_dim() +
                        static_cast<int64_t>(hp.ssm_n_v_heads) * hp.ssm_d_state * hp.ssm_d_state;
  at_.gdn_scratch = take(options.max_seqs * gdn_scratch_floats_);
  f_.assign(off, 0.0f);

  size_t ioff = 0;
  auto itake = [&ioff](int64_t n) {
    const size_t at = ioff;
    ioff += static_cast<size_t>(n);
    return at;
  };
  at_.topk_ids = itake(T * k);
  at_.rows_x = itake(T * k);
  at_.rows_y = itake(T * k);
  at_.counts = itake(hp.n_expert);
  at_.offsets = itake(hp.n_expert + 1);
  i_.assign(ioff, 0);

  const int64_t main_in = std::max({hp.n_embd, hp.ssm_d_inner, q_dim, hp.n_ff_shexp});
  acts_main_.resize(5);
  acts_ff_.resize(5);
  for (kernels::ActFormat f : model.activation_formats()) {
    acts_main_[static_cast<int>(f)].Reserve(std::max(T, logit_rows), main_in);
    acts_ff_[static_cast<int>(f)].Reserve(T * k, hp.n_ff_exp);
  }
  jobs_.reserve(2 * static_cast<size_t>(hp.n_expert) + 4);
  seq_logit_offset_.assign(options.max_seqs, 0);
  seq_logit_count_.assign(options.max_seqs, 0);
}

std::span<const float> ForwardContext::logits(int s) const {
  if (s < 0 || s >= static_cast<int>(seq_logit_count_.size()))
    Fail("logits: no sequence {} in the last pass", s);
  const float* base = f_.data() + at_.logits;
  return {base + seq_logit_offset_[s] * n_vocab_,
          static_cast<size_t>(seq_logit_count_[s] * n_vocab_)};
}

kernels::Activations& Model::Prepare(std::vector<kernels::Activations>& acts, GgmlType type,
                                     const float* x, int64_t rows, int64_t n_in, int64_t ldx,
                                     ThreadPool& pool) const {
  kernels::Activations& a = acts[static_cast<int>(kernels::ActFormatFor(type))];
  kernels::PrepareActivations(type, x, rows, n_in, ldx, a, pool);
  return a;
}

void Model::EmbedTokens(std::span<const SequenceInput> seqs, ForwardContext& ctx) const {
  float* x = ctx.f_.data() + ctx.at_.x;
  int64_t row = 0;
  for (const SequenceInput& in : seqs) {
    for (int32_t tok : in.tokens) {
      const std::byte* src = w_.token_embd + static_cast<size_t>(tok) * w_.token_embd_row_bytes;
      DequantizeRow(w_.token_embd_type, src, x + row * hp_.n_embd, hp_.n_embd);
      ++row;
    }
  }
}

void Model::Forward(std::span<const SequenceInput> seqs, ForwardContext& ctx,
                    ThreadPool& pool) const {
  const ContextOptions& opt = ctx.options_;
  if (seqs.empty()) Fail("forward: empty batch");
  if (static_cast<int64_t>(seqs.size()) > opt.max_seqs) {
    Fail("forward: {} sequences in one pass, the context holds {}", seqs.size(), opt.max_seqs);
  }
  // Validate everything before any state changes.
  std::array<SeqSpan, 64> span_storage;
  std::vector<SeqSpan> span_heap;  // only for > 64 sequences (a configuration choice, not per pass)
  SeqSpan* spans = span_storage.data();
  if (seqs.size() > span_storage.size()) {
    span_heap.resize(seqs.size());
    spans = span_heap.data();
  }
  int64_t total = 0, logit_rows = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SequenceInput& in = seqs[s];
    if (!in.state) Fail("forward: sequence {} has no state", s);
    const int64_t T = static_cast<int64_t>(in.tokens.size());
    if (T == 0) Fail("forward: sequence {} has no tokens", s);
    for (size_t j = 0; j < s; ++j) {
      if (seqs[j].state == in.state) Fail("forward: sequences {} and {} share one state", j, s);
    }
    if (in.state->n_past() + T > in.state->n_ctx()) {
      Fail("forward: sequence {} would hold {} tokens, its context holds {} (raise -c / n_ctx)", s,
           in.state->n_past() + T, in.state->n_ctx());
    }
    for (int32_t tok : in.tokens) {
      if (tok < 0 || tok >= hp_.n_vocab)
        Fail("forward: token id {} is outside the vocabulary [0, {})", tok, hp_.n_vocab);
    }
    if (in.record && (in.kind != PassKind::kCausal || T > in.state->max_record_tokens())) {
      Fail(
          "forward: sequence {} asks to record {} tokens; recording needs a causal pass of at most "
          "StateOptions.max_record_tokens ({}) tokens",
          s, T, in.state->max_record_tokens());
    }
    spans[s] = SeqSpan{total, T, in.state->n_past()};
    total += T;
    logit_rows += in.logits == LogitRows::kAll ? T : in.logits == LogitRows::kLast ? 1 : 0;
  }
  if (total > opt.max_tokens)
    Fail("forward: {} tokens in one pass, the context holds {}", total, opt.max_tokens);
  if (logit_rows > opt.max_logit_rows) {
    Fail("forward: {} logit rows requested, the context holds {}", logit_rows, opt.max_logit_rows);
  }
  const std::span<const SeqSpan> sp(spans, seqs.size());

  EmbedTokens(seqs, ctx);
  float* x = ctx.f_.data() + ctx.at_.x;
  float* h = ctx.f_.data() + ctx.at_.h;
  float* cur = ctx.f_.data() + ctx.at_.cur;
  const int64_t E = hp_.n_embd;
  for (int il = 0; il < hp_.n_layer; ++il) {
    const LayerWeights& L = w_.layers[il];
    for (int64_t t = 0; t < total; ++t)
      kernels::RmsNorm(x + t * E, L.attn_norm.data(), h + t * E, E, hp_.rms_eps);
    if (L.recurrent) {
      GdnLayer(il, layer_slot_[il], seqs, sp, ctx, pool);
    } else {
      AttentionLayer(il, layer_slot_[il], seqs, sp, ctx, pool);
    }
    kernels::Add(x, cur, x, total * E);
    for (int64_t t = 0; t < total; ++t) {
      kernels::RmsNorm(x + t * E, L.post_attention_norm.data(), h + t * E, E, hp_.rms_eps);
    }
    MoeLayer(il, total, ctx, pool);
    kernels::Add(x, cur, x, total * E);
  }
  Output(seqs, sp, ctx, pool);
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (seqs[s].kind == PassKind::kCausal) seqs[s].state->Advance(sp[s].T, seqs[s].record);
  }
}

void Model::Output(std::span<const SequenceInput> seqs, std::span<const SeqSpan> spans,
                   ForwardContext& ctx, ThreadPool& pool) const {
  const int64_t E = hp_.n_embd;
  const float* x = ctx.f_.data() + ctx.at_.x;
  float* outh = ctx.f_.data() + ctx.at_.outh;
  int64_t n = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SeqSpan& span = spans[s];
    ctx.seq_logit_offset_[s] = n;
    int64_t first = span.T, count = 0;
    if (seqs[s].logits == LogitRows::kAll) {
      first = 0;
      count = span.T;
    } else if (seqs[s].logits == LogitRows::kLast) {
      first = span.T - 1;
      count = 1;
    }
    for (int64_t i = 0; i < count; ++i) {
      kernels::RmsNorm(x + (span.row0 + first + i) * E, w_.output_norm.data(), outh + (n + i) * E,
                       E, hp_.rms_eps);
    }
    ctx.seq_logit_count_[s] = count;
    n += count;
  }
  for (size_t s = seqs.size(); s < ctx.seq_logit_count_.size(); ++s) ctx.seq_logit_count_[s] = 0;
  if (n == 0) return;
  kernels::Activations& a = Prepare(ctx.acts_main_, w_.output.type, outh, n, E, E, pool);
  kernels::MatMul(w_.output, a, ctx.f_.data() + ctx.at_.logits, hp_.n_vocab, pool);
}

}  // namespace crossword::model
