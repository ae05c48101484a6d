// The recorded forward pass of the Vulkan executor: the CPU executor's src/backends/cpu/executor.cc
// (Run, Output) and layers.cc (GdnIn/Core/Out, AttentionIn/Core/Out, MoeLayer) op for op, on
// device buffers. The
// residual adds are fused into the following RMSNorm (RmsNorm kAdd), which computes the same
// x + cur then norm as the CPU's Add and RmsNorm.
#include <algorithm>
#include <initializer_list>

#include "backends/vulkan/executor.h"
#include "backends/vulkan/executor_internal.h"
#include "base/error.h"

namespace crossword::vulkan {

namespace {

using model::Hparams;
using model::LogitRows;
using model::PassKind;

bool KQuant(GgmlType t) {
  return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ6_K;
}

// The view from byte `off` to its end (a strided operand that starts inside a row).
BufferView From(BufferView v, uint64_t off) { return v.Sub(off, v.size - off); }

// Quantized activations of one input, in the formats its consumers read (int8 path only).
struct Quantized {
  BufferView q0, qk;
  int64_t ld0 = 0, ldk = 0;
  BufferView For(GgmlType t) const { return KQuant(t) ? qk : q0; }
  int64_t Ld(GgmlType t) const { return KQuant(t) ? ldk : ld0; }
};

// Quantizes rows of x (n_in elements at stride ldx) once per int8 format that one of `ms`
// uses in this recording (kernels::PrepareActivations per format, as the CPU's Prepare).
Quantized Quantize(CommandList& cl, BufferView x, int64_t ldx, int64_t rows, int64_t n_in,
                   BufferView xq0, BufferView xqk, std::initializer_list<const DeviceMatrix*> ms) {
  Quantized q;
  for (const DeviceMatrix* m : ms) {
    if (!m || m->pieces.empty() || !cl.UsesInt8(m->type)) continue;
    if (KQuant(m->type) && !q.qk.valid()) {
      q.ldk = ActQ8RowWords(m->type, n_in);
      q.qk = xqk;
      QuantizeActivations(cl, m->type, x, ldx, rows, n_in, q.qk, q.ldk);
    } else if (!KQuant(m->type) && !q.q0.valid()) {
      q.ld0 = ActQ8RowWords(m->type, n_in);
      q.q0 = xq0;
      QuantizeActivations(cl, m->type, x, ldx, rows, n_in, q.q0, q.ld0);
    }
  }
  return q;
}

void Mm(CommandList& cl, const DeviceMatrix& w, BufferView x, int64_t ldx, const Quantized& q,
        int64_t rows, BufferView y, int64_t ldy) {
  MatMulArgs a;
  a.w = &w;
  a.x = x;
  a.ldx = ldx;
  a.xq = q.For(w.type);
  a.ldxq = q.Ld(w.type);
  a.n_rows = rows;
  a.y = y;
  a.ldy = ldy;
  MatMul(cl, a);
}

}  // namespace

void VulkanExecutor::RecordPass(CommandList& cl, DeviceState& st, int64_t T, PassKind kind,
                                LogitRows rows, bool record, uint64_t skip_ffn) const {
  const Hparams& hp = hparams();
  const Scratch& s = *s_;
  const int64_t E = hp.n_embd;
  GetRows(cl, *token_embd_, s.ids, T, s.x, E);
  for (int il = 0; il < n_layers_; ++il) {
    const Layer& L = layers_[static_cast<size_t>(il)];
    RmsNormArgs n;
    // x += the previous layer's MoE, unless it skipped its FFN (SequenceInput::skip_ffn_layers).
    const bool prev_ffn = il > 0 && !(il - 1 < 64 && (skip_ffn >> (il - 1) & 1));
    n.mode = prev_ffn ? RmsNormArgs::kAdd : RmsNormArgs::kPlain;
    n.x = s.x;
    n.ldx = E;
    n.residual = s.cur;
    n.ld_res = E;
    n.w = L.attn_norm;
    n.y = s.h;
    n.ldy = E;
    n.n = E;
    n.n_rows = T;
    n.eps = hp.rms_eps;
    RmsNorm(cl, n);
    if (L.recurrent) {
      RecordGdn(cl, il, layer_slot_[il], st, T, kind == PassKind::kDenoise, record);
    } else {
      RecordAttention(cl, il, layer_slot_[il], st, T, kind == PassKind::kCausal);
    }
    n.mode = RmsNormArgs::kAdd;  // x += attention / GDN output
    n.w = L.post_attention_norm;
    RmsNorm(cl, n);
    if (!(il < 64 && (skip_ffn >> il & 1))) RecordMoe(cl, il, T);
  }
  if (n_layers_ < hp.n_layer) {  // a split: the residual stream goes to the CPU's layers
    const uint64_t bytes = static_cast<uint64_t>(T * E) * 4;
    if (n_layers_ > 0) Add(cl, s.x, s.cur, s.x, T * E);
    cl.Copy(s.x.Sub(0, bytes), s.hidden.Sub(0, bytes));
    return;
  }
  // Output: x += the last MoE output on the rows that get logits, final norm, head.
  const int64_t first = rows == LogitRows::kAll ? 0 : T - 1;
  const int64_t count = rows == LogitRows::kAll ? T : rows == LogitRows::kLast ? 1 : 0;
  if (count == 0) return;
  RmsNormArgs n;
  n.mode = hp.n_layer > 0 ? RmsNormArgs::kAdd : RmsNormArgs::kPlain;
  n.x = From(s.x, static_cast<uint64_t>(first * E) * 4);
  n.ldx = E;
  n.residual = From(s.cur, static_cast<uint64_t>(first * E) * 4);
  n.ld_res = E;
  n.w = output_norm_;
  n.y = s.outh;
  n.ldy = E;
  n.n = E;
  n.n_rows = count;
  n.eps = hp.rms_eps;
  RmsNorm(cl, n);
  const Quantized q = Quantize(cl, s.outh, E, count, E, s.xq0, s.xqk, {output_matrix_});
  Mm(cl, *output_matrix_, s.outh, E, q, count, s.logits, hp.n_vocab);
}

void VulkanExecutor::RecordGdn(CommandList& cl, int il, int r, DeviceState& st, int64_t T,
                               bool denoise, bool record) const {
  const Hparams& hp = hparams();
  const Layer& L = layers_[static_cast<size_t>(il)];
  const Scratch& s = *s_;
  const DeviceState::GdnLayerState& gs = st.gdn_[static_cast<size_t>(r)];
  const int64_t E = hp.n_embd, conv_dim = hp.conv_dim(), key_dim = hp.ssm_key_dim();
  const int64_t d_inner = hp.ssm_d_inner, ds = hp.ssm_d_state;
  const int n_v = hp.ssm_n_v_heads;
  // A recorded pass writes the conv input, its output and the gates straight into the
  // sequence's recording (what model::SequenceState::record keeps), so recording copies nothing.
  const BufferView qkv = record ? gs.qkv : s.qkv;
  const BufferView conv = record ? gs.qkv_conv : s.conv;
  const BufferView g = record ? gs.g : s.g;
  const BufferView beta = record ? gs.beta : s.beta;

  const Quantized q = Quantize(cl, s.h, E, T, E, s.xq0, s.xqk,
                               {&L.attn_qkv, &L.attn_gate, &L.ssm_beta, &L.ssm_alpha});
  Mm(cl, L.attn_qkv, s.h, E, q, T, qkv, conv_dim);
  Mm(cl, L.attn_gate, s.h, E, q, T, s.z, d_inner);
  Mm(cl, L.ssm_beta, s.h, E, q, T, s.b, n_v);
  Mm(cl, L.ssm_alpha, s.h, E, q, T, s.a, n_v);
  GdnGates(cl, s.b, n_v, s.a, n_v, L.ssm_dt_bias, L.ssm_a, T, n_v, g, beta, n_v);

  BufferView conv_state = gs.conv, ssm_state = gs.ssm;
  if (denoise) {  // as layers.cc (GdnDenoiseState, GdnConvRows): from the committed state
    if (conv_state.valid()) {
      cl.Copy(conv_state, s.conv_state);
      conv_state = s.conv_state.Sub(0, gs.conv.size);
    }
    cl.Copy(ssm_state, s.ssm_state);
    ssm_state = s.ssm_state.Sub(0, gs.ssm.size);
  }
  Conv1dArgs c;
  c.x = qkv;
  c.ldx = conv_dim;
  c.T = T;
  c.C = conv_dim;
  c.K = hp.ssm_d_conv;
  c.w = L.ssm_conv1d;
  c.state_in = c.state_out = conv_state;
  if (record) c.state0_record = gs.conv0;
  c.y = conv;
  c.ldy = conv_dim;
  c.head_dim = ds;
  c.n_l2_heads = 2 * hp.ssm_n_k_heads;
  c.l2_eps = hp.rms_eps;
  CausalConv1dSiluL2(cl, c);

  GdnArgs a;
  a.T = DynInt::Const(static_cast<int32_t>(T));
  a.max_T = T;
  a.n_k_heads = hp.ssm_n_k_heads;
  a.n_v_heads = n_v;
  a.dk = a.dv = ds;
  a.q = conv;
  a.k = From(conv, static_cast<uint64_t>(key_dim) * 4);
  a.v = From(conv, static_cast<uint64_t>(2 * key_dim) * 4);
  a.ldq = a.ldk = a.ldv = conv_dim;
  a.g = g;
  a.beta = beta;
  a.ldg = n_v;
  a.state_in = a.state_out = ssm_state;
  if (record) a.state0_record = gs.ssm0;
  a.out = s.o;
  a.ldo = d_inner;
  GatedDeltaRule(cl, a);

  // Gated RMSNorm per value head (weight shared by the heads, not +1), times silu(z).
  RmsNormArgs n;
  n.mode = RmsNormArgs::kGate;
  n.x = s.o;
  n.ldx = d_inner;
  n.x_hs = ds;
  n.w = L.ssm_norm;
  n.gate = s.z;
  n.ld_gate = d_inner;
  n.gate_hs = ds;
  n.y = s.o;
  n.ldy = d_inner;
  n.y_hs = ds;
  n.n = ds;
  n.n_heads = n_v;
  n.n_rows = T;
  n.eps = hp.rms_eps;
  RmsNorm(cl, n);
  const Quantized qo = Quantize(cl, s.o, d_inner, T, d_inner, s.xq0, s.xqk, {&L.ssm_out});
  Mm(cl, L.ssm_out, s.o, d_inner, qo, T, s.cur, E);
}

void VulkanExecutor::RecordAttention(CommandList& cl, int il, int a_idx, DeviceState& st, int64_t T,
                                     bool causal) const {
  const Hparams& hp = hparams();
  const Layer& L = layers_[static_cast<size_t>(il)];
  const Scratch& s = *s_;
  const int64_t E = hp.n_embd, hd = hp.head_dim;
  const int64_t q_dim = static_cast<int64_t>(hp.n_head) * hd;
  const int64_t kv_dim = static_cast<int64_t>(hp.n_head_kv) * hd;
  const Quantized q = Quantize(cl, s.h, E, T, E, s.xq0, s.xqk, {&L.attn_q, &L.attn_k, &L.attn_v});
  Mm(cl, L.attn_q, s.h, E, q, T, s.qg, 2 * q_dim);
  Mm(cl, L.attn_k, s.h, E, q, T, s.kk, kv_dim);
  Mm(cl, L.attn_v, s.h, E, q, T, s.vv, kv_dim);

  // Per-head RMSNorm of q and k, then NeoX rope on the first n_rot dims at n_past + t.
  HeadNormRopeArgs r;
  r.x = s.qg;
  r.ldx = 2 * q_dim;
  r.head_stride = 2 * hd;
  r.head_dim = hd;
  r.n_heads = hp.n_head;
  r.n_tokens = T;
  r.norm_w = L.attn_q_norm;
  r.eps = hp.rms_eps;
  r.rope = st.rope_;
  r.rope_positions = st.n_ctx();
  r.n_rot = hp.n_rot;
  r.pos0 = DynInt::Slot(0);
  HeadNormRope(cl, r);
  r.x = s.kk;
  r.ldx = kv_dim;
  r.head_stride = hd;
  r.n_heads = hp.n_head_kv;
  r.norm_w = L.attn_k_norm;
  HeadNormRope(cl, r);

  const BufferView kc = st.k_cache_[static_cast<size_t>(a_idx)];
  const BufferView vc = st.v_cache_[static_cast<size_t>(a_idx)];
  KvWrite(cl, s.kk, kv_dim, s.vv, kv_dim, T, kv_dim, DynInt::Slot(0), kc, vc, st.n_ctx());

  AttentionArgs a;
  a.q = s.qg;
  a.ldq = 2 * q_dim;
  a.q_hs = 2 * hd;
  a.k_cache = kc;
  a.v_cache = vc;
  a.kv_row = kv_dim;
  a.n_ctx = st.n_ctx();
  a.T = T;
  a.n_past = DynInt::Slot(0);
  a.n_head = hp.n_head;
  a.n_head_kv = hp.n_head_kv;
  a.head_dim = hd;
  a.causal = causal;
  a.gate = From(s.qg, static_cast<uint64_t>(hd) * 4);  // the second half of each head's rows
  a.ld_gate = 2 * q_dim;
  a.gate_hs = 2 * hd;
  a.out = s.ao;
  a.ldo = q_dim;
  a.out_hs = hd;
  a.n_splits = AttentionSplitsFor(st.n_ctx());
  a.scratch = s.attn;
  Attention(cl, a);
  const Quantized qa = Quantize(cl, s.ao, q_dim, T, q_dim, s.xq0, s.xqk, {&L.attn_output});
  Mm(cl, L.attn_output, s.ao, q_dim, qa, T, s.cur, E);
}

void VulkanExecutor::RecordMoe(CommandList& cl, int il, int64_t T) const {
  const Hparams& hp = hparams();
  const Layer& L = layers_[static_cast<size_t>(il)];
  const Scratch& s = *s_;
  const int64_t E = hp.n_embd;
  const int k = hp.n_expert_used;
  const bool shared = hp.n_expert_shared > 0;
  const Quantized q =
      Quantize(cl, s.h, E, T, E, s.xq0, s.xqk,
               {&L.ffn_gate_inp, &L.gate_up_exps, shared ? &L.gate_up_shexp : nullptr});
  Mm(cl, L.ffn_gate_inp, s.h, E, q, T, s.router, hp.n_expert);
  MoeRoute(cl, s.router, hp.n_expert, T, hp.n_expert, k, s.topk_ids, s.topk_w);
  MoeGroup(cl, s.topk_ids, T, k, hp.n_expert, s.group);

  MoeGateUpArgs gu;
  gu.gate_up = &L.gate_up_exps;
  gu.x = s.h;
  gu.ldx = E;
  gu.xq = q.For(L.gate_up_exps.type);
  gu.ldxq = q.Ld(L.gate_up_exps.type);
  gu.n_tokens = T;
  gu.k = k;
  gu.group = s.group;
  gu.h = s.hff;
  gu.ldh = hp.n_ff_exp;
  MoeGateUp(cl, gu);
  if (shared) {
    gu.gate_up = &L.gate_up_shexp;
    gu.xq = q.For(L.gate_up_shexp.type);
    gu.ldxq = q.Ld(L.gate_up_shexp.type);
    gu.dense = true;
    gu.group = {};
    gu.h = s.hsh;
    gu.ldh = hp.n_ff_shexp;
    MoeGateUp(cl, gu);
  }

  const Quantized qd =
      Quantize(cl, s.hff, hp.n_ff_exp, T * k, hp.n_ff_exp, s.xq0, s.xqk, {&L.down_exps});
  MoeDownArgs d;
  d.down = &L.down_exps;
  d.h = s.hff;
  d.ldh = hp.n_ff_exp;
  d.hq = qd.For(L.down_exps.type);
  d.ldhq = qd.Ld(L.down_exps.type);
  d.n_tokens = T;
  d.k = k;
  d.group = s.group;
  d.out = s.down;
  d.ldo = E;
  MoeDown(cl, d);
  if (shared) {
    const Quantized qs =
        Quantize(cl, s.hsh, hp.n_ff_shexp, T, hp.n_ff_shexp, s.xq0, s.xqk, {&L.down_shexp});
    d.down = &L.down_shexp;
    d.h = s.hsh;
    d.ldh = hp.n_ff_shexp;
    d.hq = qs.For(L.down_shexp.type);
    d.ldhq = qs.Ld(L.down_shexp.type);
    d.dense = true;
    d.group = {};
    d.out = s.sh;
    MoeDown(cl, d);
  }

  MoeCombineArgs c;
  c.down = s.down;
  c.ld_down = E;
  c.weights = s.topk_w;
  c.k = k;
  if (shared) {
    c.shared = s.sh;
    c.ld_shared = E;
    c.shared_gate_w = L.ffn_gate_inp_shexp;
  }
  c.f = s.h;
  c.ldf = E;
  c.y = s.cur;
  c.ldy = E;
  c.n_tokens = T;
  c.n_embd = E;
  MoeCombine(cl, c);
}

void VulkanExecutor::RecordRollback(CommandList& cl, DeviceState& st) const {
  const Hparams& hp = hparams();
  const int64_t conv_dim = hp.conv_dim(), key_dim = hp.ssm_key_dim();
  for (const DeviceState::GdnLayerState& gs : st.gdn_) {
    // state.cc RollbackTo: the conv window from the recorded start window and inputs, the SSM
    // state by replaying the recorded recurrence inputs of the kept tokens (n_keep: slot 1).
    if (gs.conv.valid()) {
      ConvStateRollback(cl, gs.conv0, gs.qkv, conv_dim, conv_dim, hp.ssm_d_conv, DynInt::Slot(1),
                        st.max_record_tokens(), gs.conv);
    }
    GdnArgs a;
    a.T = DynInt::Slot(1);
    a.max_T = st.max_record_tokens();
    a.n_k_heads = hp.ssm_n_k_heads;
    a.n_v_heads = hp.ssm_n_v_heads;
    a.dk = a.dv = hp.ssm_d_state;
    a.q = gs.qkv_conv;
    a.k = From(gs.qkv_conv, static_cast<uint64_t>(key_dim) * 4);
    a.v = From(gs.qkv_conv, static_cast<uint64_t>(2 * key_dim) * 4);
    a.ldq = a.ldk = a.ldv = conv_dim;
    a.g = gs.g;
    a.beta = gs.beta;
    a.ldg = hp.ssm_n_v_heads;
    a.state_in = gs.ssm0;
    a.state_out = gs.ssm;
    a.out = s_->o;
    a.ldo = hp.ssm_d_inner;
    GatedDeltaRule(cl, a);
  }
}

}  // namespace crossword::vulkan
