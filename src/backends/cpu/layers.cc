// The CPU executor's per-layer math of qwen35moe / clover_moe (docs/model.md): Gated DeltaNet,
// gated attention, and the routed + shared mixture of experts.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/executor.h"
#include "backends/cpu/state.h"
#include "base/error.h"

namespace crossword::backends::cpu {

using model::LayerWeights;
using model::PassKind;
using model::SequenceInput;

namespace {

/// The K-1 conv input rows (C floats each, oldest first) before batch row t of a sequence whose
/// rows start at batch row c0 (t >= c0): rows of `qkv` ([batch row][C]), and for positions
/// before c0 the rows of its conv `state` ([K-1][C]). Returns them in place when they are all of
/// one kind, else copies them into `window` ([K-1][C]) and returns it.
const float* ConvRowsBefore(int64_t t, int64_t c0, const float* state, const float* qkv, int64_t C,
                            int K, float* window) {
  if (t == c0) return state;
  if (t - c0 >= K - 1) return qkv + (t - (K - 1)) * C;
  for (int i = 0; i < K - 1; ++i) {
    const int64_t row = t - (K - 1) + i;
    const float* src = row >= c0 ? qkv + row * C : state + (K - 1 - (c0 - row)) * C;
    std::copy(src, src + C, window + i * C);
  }
  return window;
}

}  // namespace

void CpuExecutor::Project(RowScratch& s, const float* h, int64_t rows,
                          std::initializer_list<Projection> ps) const {
  const int64_t E = hp_.n_embd;
  bool prepared[5] = {false, false, false, false, false};
  auto& jobs = s.jobs;
  jobs.clear();
  for (const Projection& p : ps) {
    const int fi = static_cast<int>(kernels::ActFormatFor(p.w->type));
    if (!prepared[fi]) Prepare(s.acts_main, p.w->type, h, rows, E, E);
    prepared[fi] = true;
    jobs.push_back({.w = *p.w, .x = &s.acts_main[fi], .n_rows = rows, .y = p.y, .ldy = p.ldy});
  }
  kernels::MatMul(jobs, *pool_);
}

void CpuExecutor::GdnConvRows(int il, int64_t t0, int64_t t1, int64_t c0, const float* state,
                              float* window, CpuContext& ctx) const {
  if (t1 <= t0) return;
  const int K = hp_.ssm_d_conv;
  const int64_t C = hp_.conv_dim();
  const int64_t ds = hp_.ssm_d_state;
  const float* qkv = ctx.F(ctx.at_.gdn_qkv);
  float* conv = ctx.F(ctx.at_.gdn_conv);
  const float* prev = ConvRowsBefore(t0, c0, state, qkv, C, K, window);
  kernels::Conv1dArgs c;
  c.x = qkv + t0 * C;
  c.ldx = C;
  c.T = t1 - t0;
  c.C = C;
  c.K = K;
  c.w = w_.layers[il].ssm_conv1d.data();
  c.w_taps = conv_taps_[static_cast<size_t>(il)].data();
  c.state = const_cast<float*>(prev);  // read only: update_state is false
  c.y = conv + t0 * C;
  c.ldy = C;
  c.update_state = false;
  kernels::CausalConv1dSilu(c, *pool_);
  // L2-normalize each q and k head (eps = rms eps, as llama.cpp).
  for (int64_t t = t0; t < t1; ++t) {
    float* row = conv + t * C;
    for (int64_t hd = 0; hd < 2 * hp_.ssm_n_k_heads; ++hd)
      kernels::L2Norm(row + hd * ds, ds, hp_.rms_eps);
  }
}

void CpuExecutor::GdnIn(int il, int64_t r0, int64_t n, RowScratch& s, CpuContext& ctx,
                        std::span<const SequenceInput> seqs,
                        std::span<const SeqSpan> chains) const {
  const LayerWeights& L = w_.layers[il];
  float* f = ctx.f_.data();
  const auto& at = ctx.at_;
  const int64_t conv_dim = hp_.conv_dim();
  const int64_t d_inner = hp_.ssm_d_inner;
  const int n_v = hp_.ssm_n_v_heads;
  float* qkv = f + at.gdn_qkv + r0 * conv_dim;       // [T][conv_dim]
  float* z = f + at.gdn_z + r0 * d_inner;            // [T][d_inner]
  float* ab = f + at.gdn_beta_alpha + r0 * 2 * n_v;  // [T][2 n_v]: beta logits then alpha
  float* g = f + at.gdn_decay + r0 * n_v;
  float* beta = f + at.gdn_beta + r0 * n_v;

  // Projections qkv, z, beta, alpha of the normed input, in one parallel region.
  Project(s, f + at.normed + r0 * hp_.n_embd, n,
          {{&L.attn_qkv, qkv, conv_dim},
           {&L.attn_gate, z, d_inner},
           {&L.ssm_beta, ab, 2 * n_v},
           {&L.ssm_alpha, ab + n_v, 2 * n_v}});

  // beta = sigmoid(b); g = softplus(a + dt_bias) * ssm_a  (ssm_a = -exp(A_log) <= 0).
  for (int64_t t = 0; t < n; ++t) {
    kernels::Sigmoid(ab + t * 2 * n_v, beta + t * n_v, n_v);
    float* gt = g + t * n_v;
    kernels::Add(ab + t * 2 * n_v + n_v, L.ssm_dt_bias.data(), gt, n_v);
    kernels::Softplus(gt, gt, n_v);
    kernels::Mul(gt, L.ssm_a.data(), gt, n_v);
  }

  // The conv of this block's rows: it is short (K taps), so it runs here, on the block's thread,
  // not serially over the whole pass, except for rows whose window reaches into the block before
  // (the first K-1 rows of a block that starts inside a sequence): GdnCore computes those once
  // every block's qkv rows are in. Every sequence's rows read its conv state as the pass found
  // it; GdnCore advances the state after the layer's whole conv.
  const int K = hp_.ssm_d_conv;
  for (size_t q = 0; q < seqs.size(); ++q) {
    const int64_t c0 = chains[q].row0, c1 = c0 + chains[q].T;
    const int64_t b = std::min(r0 + n, c1);
    int64_t a = std::max(r0, c0);
    if (a >= b) continue;
    if (c0 < r0) a = std::min(b, r0 + K - 1);
    const auto& st = static_cast<const CpuState&>(*seqs[q].state);
    GdnConvRows(il, a, b, c0, st.conv_state(layer_slot_[il]), s.conv_window.data(), ctx);
  }
}

void CpuExecutor::GdnCore(int il, int r, std::span<const SequenceInput> seqs,
                          std::span<const SeqSpan> spans, CpuContext& ctx,
                          std::span<const SequenceInput> chain_seqs,
                          std::span<const SeqSpan> chains, std::span<const int64_t> bounds) const {
  ThreadPool& pool = *pool_;
  const int K = hp_.ssm_d_conv;
  float* window = ctx.parts_[0].conv_window.data();
  // The conv rows GdnIn left: the first K-1 rows of each row block that starts inside a sequence.
  for (size_t p = 1; p + 1 < bounds.size(); ++p) {
    const int64_t r0 = bounds[p];
    for (size_t q = 0; q < chain_seqs.size(); ++q) {
      const int64_t c0 = chains[q].row0, c1 = c0 + chains[q].T;
      if (c0 >= r0 || c1 <= r0) continue;
      const auto& st = static_cast<const CpuState&>(*chain_seqs[q].state);
      GdnConvRows(il, r0, std::min({r0 + K - 1, c1, bounds[p + 1]}), c0, st.conv_state(r), window,
                  ctx);
    }
  }
  float* f = ctx.f_.data();
  const auto& at = ctx.at_;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SequenceInput& in = seqs[s];
    const SeqSpan& sp = spans[s];
    CpuState& st = static_cast<CpuState&>(*in.state);
    float* conv_state = st.conv_state(r);
    float* ssm_state = st.ssm_state(r);
    if (in.kind == PassKind::kDenoise) {
      float* scratch = f + at.gdn_scratch + sp.seq * ctx.gdn_scratch_floats_;
      GdnDenoiseState(ssm_state, st.ssm_floats(), scratch);
      ssm_state = scratch;
    }
    CpuState::Record rec{};
    if (in.record) {
      rec = st.record(r);
      std::memcpy(rec.conv0, conv_state, sizeof(float) * st.conv_floats());
      std::memcpy(rec.ssm0, ssm_state, sizeof(float) * st.ssm_floats());
      GdnRecordRows(rec, sp, 0, sp.T, ctx);
    }
    if (in.kind == PassKind::kCausal && K > 1) AdvanceConvState(conv_state, sp, window, ctx);
    kernels::GatedDeltaRule(GdnArgsFor(sp, ssm_state, 0, sp.T, ctx), pool);
  }
}

void CpuExecutor::GdnDenoiseState(const float* committed_ssm, int64_t ssm_floats,
                                  float* scratch_ssm) {
  std::memcpy(scratch_ssm, committed_ssm, sizeof(float) * ssm_floats);
}

void CpuExecutor::GdnRecordRows(const CpuState::Record& rec, const SeqSpan& sp, int64_t t0,
                                int64_t t1, CpuContext& ctx) const {
  const float* f = ctx.f_.data();
  const auto& at = ctx.at_;
  const int64_t conv_dim = hp_.conv_dim();
  const int n_v = hp_.ssm_n_v_heads;
  const int64_t r0 = sp.row0 + t0, n = t1 - t0;
  std::memcpy(rec.qkv + t0 * conv_dim, f + at.gdn_qkv + r0 * conv_dim,
              sizeof(float) * n * conv_dim);
  std::memcpy(rec.qkv_conv + t0 * conv_dim, f + at.gdn_conv + r0 * conv_dim,
              sizeof(float) * n * conv_dim);
  std::memcpy(rec.g + t0 * n_v, f + at.gdn_decay + r0 * n_v, sizeof(float) * n * n_v);
  std::memcpy(rec.beta + t0 * n_v, f + at.gdn_beta + r0 * n_v, sizeof(float) * n * n_v);
}

void CpuExecutor::AdvanceConvState(float* conv_state, const SeqSpan& sp, float* window,
                                   CpuContext& ctx) const {
  const int K = hp_.ssm_d_conv;
  const int64_t conv_dim = hp_.conv_dim();
  const float* last = ConvRowsBefore(sp.row0 + sp.T, sp.row0, conv_state, ctx.F(ctx.at_.gdn_qkv),
                                     conv_dim, K, window);
  if (last != conv_state) std::copy(last, last + (K - 1) * conv_dim, conv_state);
}

kernels::GdnArgs CpuExecutor::GdnArgsFor(const SeqSpan& sp, float* state, int64_t t0, int64_t t1,
                                         CpuContext& ctx) const {
  const int64_t conv_dim = hp_.conv_dim();
  const int64_t key_dim = hp_.ssm_key_dim();
  const int n_v = hp_.ssm_n_v_heads;
  const int64_t r0 = sp.row0 + t0;
  kernels::GdnArgs a;
  a.T = t1 - t0;
  a.n_k_heads = hp_.ssm_n_k_heads;
  a.n_v_heads = n_v;
  a.dk = a.dv = hp_.ssm_d_state;
  a.q = ctx.F(ctx.at_.gdn_conv) + r0 * conv_dim;
  a.k = a.q + key_dim;
  a.v = a.q + 2 * key_dim;
  a.ldq = a.ldk = a.ldv = conv_dim;
  a.g = ctx.F(ctx.at_.gdn_decay) + r0 * n_v;
  a.beta = ctx.F(ctx.at_.gdn_beta) + r0 * n_v;
  a.ldg = n_v;
  a.state = state;
  a.out = ctx.F(ctx.at_.gdn_out) + r0 * hp_.ssm_d_inner;
  a.ldo = hp_.ssm_d_inner;
  return a;
}

void CpuExecutor::GdnOut(int il, int64_t r0, int64_t n, RowScratch& s, CpuContext& ctx) const {
  const LayerWeights& L = w_.layers[il];
  float* f = ctx.f_.data();
  const auto& at = ctx.at_;
  const int64_t d_inner = hp_.ssm_d_inner;
  const int64_t ds = hp_.ssm_d_state;
  float* o = f + at.gdn_out + r0 * d_inner;
  float* z = f + at.gdn_z + r0 * d_inner;
  // Gated RMSNorm per value head (weight shared by heads, not +1), times silu(z).
  for (int64_t t = 0; t < n; ++t) {
    float* orow = o + t * d_inner;
    float* zrow = z + t * d_inner;
    for (int hv = 0; hv < hp_.ssm_n_v_heads; ++hv)
      kernels::RmsNorm(orow + hv * ds, L.ssm_norm.data(), orow + hv * ds, ds, hp_.rms_eps);
    kernels::Silu(zrow, zrow, d_inner);
    kernels::Mul(orow, zrow, orow, d_inner);
  }
  kernels::Activations& ao = Prepare(s.acts_main, L.ssm_out.type, o, n, d_inner, d_inner);
  kernels::MatMul(L.ssm_out, ao, f + at.block_out + r0 * hp_.n_embd, hp_.n_embd, *pool_);
}

void CpuExecutor::CompactOutInputs(int il, int64_t r0, int64_t m, CpuContext& ctx) const {
  float* f = ctx.f_.data();
  const auto& at = ctx.at_;
  const int64_t q_dim = static_cast<int64_t>(hp_.n_head) * hp_.head_dim;
  struct Buffer {
    size_t at;
    int64_t width;
  };
  const Buffer gdn[] = {
      {at.residual, hp_.n_embd}, {at.gdn_out, hp_.ssm_d_inner}, {at.gdn_z, hp_.ssm_d_inner}};
  const Buffer attention[] = {
      {at.residual, hp_.n_embd}, {at.attn_out, q_dim}, {at.attn_q_gate, 2 * q_dim}};
  const std::span<const Buffer> buffers = w_.layers[il].is_recurrent() ? gdn : attention;
  for (int64_t j = r0; j < r0 + m; ++j) {
    const int64_t from = ctx.keep_src_[static_cast<size_t>(j)];
    if (from == j) continue;
    for (const Buffer& b : buffers)
      std::memcpy(f + b.at + j * b.width, f + b.at + from * b.width, sizeof(float) * b.width);
  }
}

void CpuExecutor::AttentionIn(int il, int64_t r0, int64_t n, RowScratch& s, CpuContext& ctx) const {
  const LayerWeights& L = w_.layers[il];
  float* f = ctx.f_.data();
  const auto& at = ctx.at_;
  const int64_t q_dim = static_cast<int64_t>(hp_.n_head) * hp_.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(hp_.n_head_kv) * hp_.head_dim;
  Project(s, f + at.normed + r0 * hp_.n_embd, n,
          {{&L.attn_q, f + at.attn_q_gate + r0 * 2 * q_dim, 2 * q_dim},
           {&L.attn_k, f + at.attn_k + r0 * kv_dim, kv_dim},
           {&L.attn_v, f + at.attn_v + r0 * kv_dim, kv_dim}});
}

void CpuExecutor::AttentionCore(int il, int a_idx, std::span<const SequenceInput> seqs,
                                std::span<const SeqSpan> spans, CpuContext& ctx) const {
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SeqSpan& sp = spans[s];
    CpuState& st = static_cast<CpuState&>(*seqs[s].state);
    // A denoise pass writes above the committed length, which it does not advance, so its K/V
    // rows are scratch.
    st.NoteKvWrite(sp.n_past, sp.T);
    AttentionPrologue(il, a_idx, st, sp, 0, sp.T, ctx);
    kernels::Attention(AttentionArgsFor(a_idx, st, sp, seqs[s].kind == PassKind::kCausal, ctx),
                       *pool_);
  }
}

void CpuExecutor::AttentionPrologue(int il, int a_idx, CpuState& st, const SeqSpan& sp, int64_t t0,
                                    int64_t t1, CpuContext& ctx) const {
  const LayerWeights& L = w_.layers[il];
  const int64_t hd = hp_.head_dim;
  const int64_t q_dim = static_cast<int64_t>(hp_.n_head) * hd;
  const int64_t kv_dim = static_cast<int64_t>(hp_.n_head_kv) * hd;
  float* qg = ctx.F(ctx.at_.attn_q_gate);  // [T][n_head][q (hd) | gate (hd)]
  float* kk = ctx.F(ctx.at_.attn_k);       // [T][kv_dim]
  float* vv = ctx.F(ctx.at_.attn_v);
  // Per-head RMSNorm of q and k, then NeoX rope on the first n_rot dims (text-only IMROPE).
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t row = sp.row0 + t;
    const int64_t pos = sp.n_past + t;
    float* q = qg + row * 2 * q_dim;
    for (int head = 0; head < hp_.n_head; ++head) {
      kernels::RmsNorm(q + head * 2 * hd, L.attn_q_norm.data(), q + head * 2 * hd, hd, hp_.rms_eps);
    }
    kernels::RopeNeox(q, hp_.n_head, hd, 2 * hd, hp_.n_rot, pos, hp_.rope_freq_base);
    float* k = kk + row * kv_dim;
    for (int head = 0; head < hp_.n_head_kv; ++head) {
      kernels::RmsNorm(k + head * hd, L.attn_k_norm.data(), k + head * hd, hd, hp_.rms_eps);
    }
    kernels::RopeNeox(k, hp_.n_head_kv, hd, hd, hp_.n_rot, pos, hp_.rope_freq_base);
  }
  // K and V at positions [n_past + t0, n_past + t1).
  const int64_t ld = st.kv_row_elems();
  const int64_t n = t1 - t0, row0 = sp.row0 + t0, pos0 = sp.n_past + t0;
  if (st.kv_type() == GgmlType::kF16) {
    uint16_t* kc = static_cast<uint16_t*>(st.k_cache(a_idx)) + pos0 * ld;
    uint16_t* vc = static_cast<uint16_t*>(st.v_cache(a_idx)) + pos0 * ld;
    kernels::F32ToF16Row(kk + row0 * kv_dim, n * kv_dim, kc);
    kernels::F32ToF16Row(vv + row0 * kv_dim, n * kv_dim, vc);
  } else {
    std::memcpy(static_cast<float*>(st.k_cache(a_idx)) + pos0 * ld, kk + row0 * kv_dim,
                sizeof(float) * n * kv_dim);
    std::memcpy(static_cast<float*>(st.v_cache(a_idx)) + pos0 * ld, vv + row0 * kv_dim,
                sizeof(float) * n * kv_dim);
  }
}

kernels::AttentionArgs CpuExecutor::AttentionArgsFor(int a_idx, CpuState& st, const SeqSpan& sp,
                                                     bool causal, CpuContext& ctx) const {
  const int64_t hd = hp_.head_dim;
  const int64_t q_dim = static_cast<int64_t>(hp_.n_head) * hd;
  kernels::AttentionArgs a;
  a.q = ctx.F(ctx.at_.attn_q_gate) + sp.row0 * 2 * q_dim;
  a.ldq = 2 * q_dim;
  a.q_head_stride = 2 * hd;
  a.k = st.k_cache(a_idx);
  a.v = st.v_cache(a_idx);
  a.kv_type = st.kv_type();
  a.ldk = a.ldv = st.kv_row_elems();
  a.out = ctx.F(ctx.at_.attn_out) + sp.row0 * q_dim;
  a.ldo = q_dim;
  a.out_head_stride = hd;
  a.T = sp.T;
  a.n_past = sp.n_past;
  a.n_head = hp_.n_head;
  a.n_head_kv = hp_.n_head_kv;
  a.head_dim = hd;
  a.causal = causal;
  return a;
}

void CpuExecutor::AttentionOut(int il, int64_t r0, int64_t n, RowScratch& s,
                               CpuContext& ctx) const {
  const LayerWeights& L = w_.layers[il];
  float* f = ctx.f_.data();
  const auto& at = ctx.at_;
  const int64_t hd = hp_.head_dim;
  const int64_t q_dim = static_cast<int64_t>(hp_.n_head) * hd;
  float* qg = f + at.attn_q_gate + r0 * 2 * q_dim;
  float* ao = f + at.attn_out + r0 * q_dim;
  // Output gate: o *= sigmoid(gate), the gate being the second half of each head's q rows.
  for (int64_t t = 0; t < n; ++t) {
    for (int head = 0; head < hp_.n_head; ++head) {
      float* gate = qg + t * 2 * q_dim + head * 2 * hd + hd;
      kernels::Sigmoid(gate, gate, hd);
      kernels::Mul(ao + t * q_dim + head * hd, gate, ao + t * q_dim + head * hd, hd);
    }
  }
  kernels::Activations& x = Prepare(s.acts_main, L.attn_output.type, ao, n, q_dim, q_dim);
  kernels::MatMul(L.attn_output, x, f + at.block_out + r0 * hp_.n_embd, hp_.n_embd, *pool_);
}

void CpuExecutor::MoeLayer(int il, int64_t r0, int64_t T, RowScratch& s, CpuContext& ctx) const {
  ThreadPool& pool = *pool_;
  const LayerWeights& L = w_.layers[il];
  float* f = ctx.f_.data();
  int32_t* iv = ctx.i_.data();
  const auto& at = ctx.at_;
  const int64_t E = hp_.n_embd;
  const int k = hp_.n_expert_used;
  const int n_expert = hp_.n_expert;
  const int64_t n_ff = std::max(hp_.n_ff_exp, hp_.n_ff_shexp);  // row stride of hg / hu
  // Rows [r0, r0 + T) of the pass; every buffer below is this block's own slice, indexed from 0
  // (the routed and shared rows of hg / hu: [T*k routed | T shared] within the block's slice).
  const float* h = f + at.normed + r0 * E;
  float* router = f + at.router_logits + r0 * n_expert;
  float* topk_w = f + at.expert_weights + r0 * k;
  int32_t* topk_ids = iv + at.expert_ids + r0 * k;
  int32_t* rows_x = iv + at.rows_x + r0 * k;
  int32_t* rows_y = iv + at.rows_y + r0 * k;
  int32_t* counts = s.counts.data();
  int32_t* offsets = s.offsets.data();
  float* hg = f + at.expert_gate + r0 * (k + 1) * n_ff;
  float* hu = f + at.expert_up + r0 * (k + 1) * n_ff;
  float* down = f + at.expert_down + r0 * k * E;  // [T*k][E]
  float* sh = f + at.shared_down + r0 * E;        // [T][E]
  float* cur = f + at.block_out + r0 * E;
  const bool shared = hp_.n_expert_shared > 0;

  bool prepared[5] = {false, false, false, false, false};
  for (const kernels::Matrix* m : {&L.ffn_gate_inp, &L.ffn_gate_exps.first, &L.ffn_up_exps.first,
                                   &L.ffn_gate_shexp, &L.ffn_up_shexp}) {
    if (!m->data) continue;
    const int fi = static_cast<int>(kernels::ActFormatFor(m->type));
    if (!prepared[fi]) Prepare(s.acts_main, m->type, h, T, E, E);
    prepared[fi] = true;
  }
  auto acts = [&](std::vector<kernels::Activations>& v, const kernels::Matrix& m) {
    return &v[static_cast<int>(kernels::ActFormatFor(m.type))];
  };
  kernels::MatMul(L.ffn_gate_inp, *acts(s.acts_main, L.ffn_gate_inp), router, n_expert, pool);

  // Route: softmax, top-k, renormalize; then group (token, slot) pairs by expert.
  std::fill(counts, counts + n_expert, 0);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t anchor = ctx.anchor_row_[static_cast<size_t>(r0 + t)];
    if (anchor < 0) {
      kernels::TopKSoftmax(router + t * n_expert, n_expert, k, topk_ids + t * k, topk_w + t * k);
    } else {
      // Expert budget (SequenceInput::expert_anchor_rows): the experts outside the anchor rows'
      // selection get -inf, so the softmax, top-k and renormalization run inside that set
      // (at least k experts: one anchor row selects k distinct ones). Run keeps a sequence
      // with anchors in one block, so the anchor rows are this block's.
      std::array<float, 1024> masked;
      std::array<uint8_t, 1024> allowed{};
      const int64_t a0 = anchor - r0;
      const int64_t n_anchor = ctx.anchor_n_[static_cast<size_t>(r0 + t)];
      for (int64_t a = a0; a < a0 + n_anchor; ++a) {
        for (int j = 0; j < k; ++j) allowed[static_cast<size_t>(topk_ids[a * k + j])] = 1;
      }
      for (int e = 0; e < n_expert; ++e) {
        masked[static_cast<size_t>(e)] = allowed[static_cast<size_t>(e)]
                                             ? router[t * n_expert + e]
                                             : -std::numeric_limits<float>::infinity();
      }
      kernels::TopKSoftmax(masked.data(), n_expert, k, topk_ids + t * k, topk_w + t * k);
    }
    for (int j = 0; j < k; ++j) ++counts[topk_ids[t * k + j]];
  }
  offsets[0] = 0;
  for (int e = 0; e < n_expert; ++e) {
    offsets[e + 1] = offsets[e] + counts[e];
    s.used[static_cast<size_t>(e)] = counts[e] > 0;
  }
  std::fill(counts, counts + n_expert, 0);
  for (int64_t t = 0; t < T; ++t) {
    for (int j = 0; j < k; ++j) {
      const int e = topk_ids[t * k + j];
      const int32_t at_e = offsets[e] + counts[e]++;
      rows_x[at_e] = static_cast<int32_t>(t);
      rows_y[at_e] = static_cast<int32_t>(t * k + j);
    }
  }
  // gate and up of every selected expert (and the shared expert) in one parallel region.
  auto& jobs = s.jobs;
  jobs.clear();
  for (int e = 0; e < n_expert; ++e) {
    const int32_t n = offsets[e + 1] - offsets[e];
    if (n == 0) continue;
    for (auto [tensor, out] : {std::pair{&L.ffn_gate_exps, hg}, std::pair{&L.ffn_up_exps, hu}}) {
      jobs.push_back({.w = tensor->Expert(e),
                      .x = acts(s.acts_main, tensor->first),
                      .n_rows = n,
                      .x_rows = rows_x + offsets[e],
                      .y = out,
                      .ldy = n_ff,
                      .y_rows = rows_y + offsets[e]});
    }
  }
  if (shared) {
    for (auto [m, out] : {std::pair{&L.ffn_gate_shexp, hg}, std::pair{&L.ffn_up_shexp, hu}}) {
      jobs.push_back(
          {.w = *m, .x = acts(s.acts_main, *m), .n_rows = T, .y = out + T * k * n_ff, .ldy = n_ff});
    }
  }
  kernels::MatMul(jobs, pool);
  // Elementwise: rows as wide as their stride are one run (one call, not a call per row).
  auto silu_mul = [&](float* g, const float* u, int64_t rows, int64_t width) {
    if (width == n_ff) return kernels::SiluMul(g, u, g, rows * n_ff);
    for (int64_t r = 0; r < rows; ++r)
      kernels::SiluMul(g + r * n_ff, u + r * n_ff, g + r * n_ff, width);
  };
  silu_mul(hg, hu, T * k, hp_.n_ff_exp);
  if (shared) silu_mul(hg + T * k * n_ff, hu + T * k * n_ff, T, hp_.n_ff_shexp);

  // down projections: routed rows (t*k + slot) in place, shared rows into sh.
  kernels::Activations& a_ff =
      Prepare(s.acts_ff, L.ffn_down_exps.first.type, hg, T * k, hp_.n_ff_exp, n_ff);
  jobs.clear();
  for (int e = 0; e < n_expert; ++e) {
    const int32_t n = offsets[e + 1] - offsets[e];
    if (n == 0) continue;
    jobs.push_back({.w = L.ffn_down_exps.Expert(e),
                    .x = &a_ff,
                    .n_rows = n,
                    .x_rows = rows_y + offsets[e],
                    .y = down,
                    .ldy = E,
                    .y_rows = rows_y + offsets[e]});
  }
  if (shared) {
    kernels::Activations& a_sh =
        Prepare(s.acts_main, L.ffn_down_shexp.type, hg + T * k * n_ff, T, hp_.n_ff_shexp, n_ff);
    jobs.push_back({.w = L.ffn_down_shexp, .x = &a_sh, .n_rows = T, .y = sh, .ldy = E});
  }
  kernels::MatMul(jobs, pool);

  // Combine in selection order, then add the sigmoid-gated shared expert. The gate's dot product
  // is summed in double, term by term in order (float x float is exact in double, so each row
  // gets the bits of a one-row pass); four rows at a time keep four chains of dependent additions
  // in flight instead of one (E of them per row, ~4 cycles each).
  constexpr int64_t kGateRows = 4;
  const float* wg = L.ffn_gate_inp_shexp.data();
  // expert_used_count <= expert_count <= 1024 (model/hparams.cc), plus the shared expert.
  constexpr size_t kMaxCombineTerms = 1025;
  std::array<const float*, kMaxCombineTerms> x;
  std::array<float, kMaxCombineTerms> w;
  for (int64_t t0 = 0; t0 < T; t0 += kGateRows) {
    const int64_t nr = std::min(kGateRows, T - t0);
    std::array<double, kGateRows> dot{};
    if (shared && nr == kGateRows) {
      const float* h0 = h + t0 * E;
      const float *h1 = h0 + E, *h2 = h1 + E, *h3 = h2 + E;
      double d0 = 0.0, d1 = 0.0, d2 = 0.0, d3 = 0.0;
      for (int64_t i = 0; i < E; ++i) {
        const double w = wg[i];
        d0 += w * h0[i];
        d1 += w * h1[i];
        d2 += w * h2[i];
        d3 += w * h3[i];
      }
      dot = {d0, d1, d2, d3};
    } else if (shared) {
      for (int64_t r = 0; r < nr; ++r) {
        const float* ht = h + (t0 + r) * E;
        double d = 0.0;
        for (int64_t i = 0; i < E; ++i) d += static_cast<double>(wg[i]) * ht[i];
        dot[static_cast<size_t>(r)] = d;
      }
    }
    // The row's experts in selection order, then the gated shared expert: one WeightedSum
    // (the bits of zeroing the row and adding each term; kernels.h).
    for (int64_t r = 0; r < nr; ++r) {
      const int64_t t = t0 + r;
      size_t n_terms = 0;
      for (int j = 0; j < k; ++j) {
        x[n_terms] = down + (t * k + j) * E;
        w[n_terms++] = topk_w[t * k + j];
      }
      if (shared) {
        x[n_terms] = sh + t * E;
        w[n_terms++] = 1.0f / (1.0f + std::exp(-static_cast<float>(dot[static_cast<size_t>(r)])));
      }
      kernels::WeightedSum({x.data(), n_terms}, {w.data(), n_terms}, cur + t * E, E);
    }
  }
}

}  // namespace crossword::backends::cpu
