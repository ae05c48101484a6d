// The shaders of the Vulkan backend as standalone ops. Each op records one or a few dispatches
// into a CommandList; it reads and writes device buffers given as views (any offset; the
// runtime binds at aligned offsets and passes the remainder) with explicit row strides.
// Shapes are fixed at record time, per-step values (positions, token counts of a replayed
// rollback) are DynInt slots of the parameter buffer. Unless stated otherwise: activations are
// f32, "ld" strides are in elements of the buffer's type, views must be large enough for the
// shapes (checked; crossword::Error names the op and the view), and nothing allocates except
// descriptor sets at record time. Formulas: kernels/kernels.h and the CPU forward pass (src/model),
// whose scalar twins (kernels/ref.h) the tests compare against. Reduction paths, tolerances and
// buffer layouts: docs/gpu.md.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/vulkan/commands.h"
#include "backends/vulkan/memory.h"

namespace crossword::vulkan {

// ---------------------------------------------------------------------------------------------
// Elementwise.

/// y[i] = a[i] + b[i], i < n (f32; y may alias a or b: residual adds).
void Add(CommandList& cl, BufferView a, BufferView b, BufferView y, int64_t n);

// ---------------------------------------------------------------------------------------------
// Embedding.

/// out[t][:] = row ids[t] of `table` dequantized to f32 (t < n_rows; ids int32 on the device,
/// out row t at t * ldo). Ids outside [0, table.n_out) give a row of zeros. Any type
/// SupportsMatrix accepts; the table may be split in pieces (one dispatch per piece).
void GetRows(CommandList& cl, const DeviceMatrix& table, BufferView ids, int64_t n_rows,
             BufferView out, int64_t ldo);

// ---------------------------------------------------------------------------------------------
// Norms and rope.

/// RMSNorm over groups of n elements: element i of head h of row r is at x[r*ldx + h*x_hs + i].
///   kPlain: y = x / sqrt(mean(x^2) + eps) * w
///   kAdd:   x += residual (written back to x), then y = norm(x) * w   (residual stream)
///   kGate:  y = norm(x) * w * silu(gate)                               (GDN gated norm)
/// w: f32 [n] or invalid (= 1). y may be x (in place). One workgroup per (row, head).
struct RmsNormArgs {
  enum Mode { kPlain, kAdd, kGate };
  Mode mode = kPlain;
  BufferView x;
  int64_t ldx = 0, x_hs = 0;
  BufferView w;
  BufferView residual;  ///< kAdd: [r*ld_res + i] (the whole row, n_heads == 1)
  int64_t ld_res = 0;
  BufferView gate;  ///< kGate: element (r, h, i) at gate[r*ld_gate + h*gate_hs + i]
  int64_t ld_gate = 0, gate_hs = 0;
  BufferView y;
  int64_t ldy = 0, y_hs = 0;
  int64_t n = 0;
  int64_t n_heads = 1;
  int64_t n_rows = 1;
  float eps = 1e-6f;
};
void RmsNorm(CommandList& cl, const RmsNormArgs& a);

/// cos/sin table of NeoX rope for positions [0, n_pos) and pairs i < n_rot/2, computed exactly
/// as kernels::RopeNeox does (theta = pos, multiplied by powf(base, -2/n_rot) once per pair;
/// cos/sin in float): entry [pos][i] = {cos, sin}. Upload it once (8 * n_pos * n_rot/2 bytes).
std::vector<float> RopeTable(int64_t n_pos, int n_rot, float freq_base);

/// Per head of each token, in place: optional RMSNorm with weight norm_w (f32 [head_dim]), then
/// NeoX rope on the first n_rot dims at position pos0 + t from `rope` (RopeTable). Head h of
/// token t at x[t*ldx + h*head_stride]. Either part may be off (norm_w / rope invalid).
struct HeadNormRopeArgs {
  BufferView x;
  int64_t ldx = 0, head_stride = 0, head_dim = 0;
  int n_heads = 1;
  int64_t n_tokens = 1;
  BufferView norm_w;
  float eps = 1e-6f;
  BufferView rope;
  int64_t rope_positions = 0;  ///< positions in the table (pos0 + t must stay below)
  int n_rot = 0;
  DynInt pos0;
};
void HeadNormRope(CommandList& cl, const HeadNormRopeArgs& a);

// ---------------------------------------------------------------------------------------------
// Matrix products.

/// uint words per activation row of the int8 format for `weight_type` with n_in elements:
/// n_in/4 quant words, then n_in/32 scales (Q4_0, Q8_0: Q8_0 format) or n_in/256 scales and
/// n_in/16 int32 sums (K-quants: Q8_K format).
int64_t ActQ8RowWords(GgmlType weight_type, int64_t n_in);

/// xq row r (at r * ldq words) = x row r (at r * ldx floats) quantized as the CPU engine's
/// PrepareActivations does for `weight_type` (kernels/kernels.h ActFormat kQ8_0 / kQ8_K).
void QuantizeActivations(CommandList& cl, GgmlType weight_type, BufferView x, int64_t ldx,
                         int64_t n_rows, int64_t n_in, BufferView xq, int64_t ldq);

/// y[r][o] (+)= sum_k W[o][k] x[r][k] for r < n_rows (1 .. any; 8 per workgroup column) and
/// o < w.n_out, in the weight's own format. The int8 path (CommandList::UsesInt8) reads xq
/// (QuantizeActivations for w.type), the float path reads x.
struct MatMulArgs {
  const DeviceMatrix* w = nullptr;
  BufferView x;
  int64_t ldx = 0;
  BufferView xq;
  int64_t ldxq = 0;
  int64_t n_rows = 1;
  BufferView y;
  int64_t ldy = 0;
  bool accumulate = false;
};
void MatMul(CommandList& cl, const MatMulArgs& a);

// ---------------------------------------------------------------------------------------------
// Mixture of experts (kernels::TopKSoftmax and the CPU forward pass's MoE layer).

/// Router tail: per token, softmax over n_expert logits, the k largest (ties: lower id),
/// weights renormalized p / max(sum, 6.103515625e-5). ids, weights: [t*k + j]. n_expert <= 1024.
void MoeRoute(CommandList& cl, BufferView logits, int64_t ld, int64_t n_tokens, int n_expert, int k,
              BufferView ids, BufferView weights);

/// Layout of the grouping buffer (int32 words) MoeGroup writes for n_pairs = n_tokens * k:
/// word 0 = number of used experts A; [active, +3*max_active): (expert, first pair, count) for
/// each used expert in increasing id; [pair_token, +n_pairs): token of each pair, pairs sorted
/// by expert (token order within an expert); [pair_row, +n_pairs): the pair's row t*k + j.
struct MoeGroupLayout {
  int64_t words = 0;
  int64_t active = 0;
  int64_t pair_token = 0;
  int64_t pair_row = 0;
  int64_t max_active = 0;
};
MoeGroupLayout MoeGroupLayoutFor(int64_t n_tokens, int k, int n_expert);
/// Compacts the (token, expert) pairs of ids [n_tokens][k] by expert (one workgroup).
void MoeGroup(CommandList& cl, BufferView ids, int64_t n_tokens, int k, int n_expert,
              BufferView group);

/// h[row][i] = silu(gate_e . x_t) * (up_e . x_t), i < n_ff, for each pair (t, j) with expert e:
/// row = t*k + j. Each used expert's rows are read once per pass (one workgroup column per used
/// expert, all its tokens). gate_up: UploadGateUp form (n_out = 2 n_ff). dense = true runs
/// expert 0 of gate_up on every token (row t; the shared expert) and ignores the group.
/// x: f32 [t*ldx], or xq (int8 path) quantized for gate_up.type.
struct MoeGateUpArgs {
  const DeviceMatrix* gate_up = nullptr;
  BufferView x, xq;
  int64_t ldx = 0, ldxq = 0;
  int64_t n_tokens = 1;
  int k = 1;
  BufferView group;
  bool dense = false;
  BufferView h;
  int64_t ldh = 0;
};
void MoeGateUp(CommandList& cl, const MoeGateUpArgs& a);

/// out[row][:] = down_e . h[row] for each pair (row = t*k + j, expert e); dense: expert 0 on
/// rows t < n_tokens. h: f32 [row*ldh] or hq (int8 path) quantized for down.type.
struct MoeDownArgs {
  const DeviceMatrix* down = nullptr;
  BufferView h, hq;
  int64_t ldh = 0, ldhq = 0;
  int64_t n_tokens = 1;
  int k = 1;
  BufferView group;
  bool dense = false;
  BufferView out;
  int64_t ldo = 0;
};
void MoeDown(CommandList& cl, const MoeDownArgs& a);

/// y[t] (+)= sum_j weights[t*k+j] * down[(t*k+j)*ld_down] (selection order)
///           + sigmoid(shared_gate_w . f[t]) * shared[t*ld_shared]   (when shared is valid)
/// over n_embd columns. shared_gate_w: f32 [n_embd] (ffn_gate_inp_shexp); f: the MoE input.
struct MoeCombineArgs {
  BufferView down;
  int64_t ld_down = 0;
  BufferView weights;
  int k = 1;
  BufferView shared;
  int64_t ld_shared = 0;
  BufferView shared_gate_w;
  BufferView f;
  int64_t ldf = 0;
  BufferView y;
  int64_t ldy = 0;
  int64_t n_tokens = 1;
  int64_t n_embd = 0;
  bool accumulate = false;
};
void MoeCombine(CommandList& cl, const MoeCombineArgs& a);

// ---------------------------------------------------------------------------------------------
// Gated DeltaNet.

/// beta[t][h] = sigmoid(b[t*ldb + h]); g[t][h] = softplus(a[t*lda + h] + dt_bias[h]) * ssm_a[h]
/// (ssm_a as stored in the GGUF: -exp(A_log)). g, beta: [t*ldg + h].
void GdnGates(CommandList& cl, BufferView b, int64_t ldb, BufferView a, int64_t lda,
              BufferView dt_bias, BufferView ssm_a, int64_t n_tokens, int n_v_heads, BufferView g,
              BufferView beta, int64_t ldg);

/// Causal depthwise conv1d (kernel K, C channels) + SiLU over X = concat(state_in [K-1][C],
/// x [T][C]), then L2 normalization (eps l2_eps) of the first n_l2_heads heads of head_dim
/// channels (q and k); state_out <- last K-1 rows of X (may be state_in). w: ssm_conv1d f32
/// [c*K + j]. state0_record (optional) receives state_in. One workgroup per head_dim channels.
struct Conv1dArgs {
  BufferView x;
  int64_t ldx = 0;
  int64_t T = 1;
  int64_t C = 0;
  int K = 4;
  BufferView w;
  BufferView state_in, state_out, state0_record;
  BufferView y;
  int64_t ldy = 0;
  int64_t head_dim = 128;
  int64_t n_l2_heads = 0;
  float l2_eps = 1e-6f;
};
void CausalConv1dSiluL2(CommandList& cl, const Conv1dArgs& a);

/// Rollback of the conv window: state_out = the last K-1 rows of concat(conv0 [K-1][C],
/// x_record[0 .. n_keep)) (x_record row t at t * ldx). n_keep may be a parameter slot.
void ConvStateRollback(CommandList& cl, BufferView conv0, BufferView x_record, int64_t ldx,
                       int64_t C, int K, DynInt n_keep, int64_t max_keep, BufferView state_out);

/// The gated delta rule (kernels::GatedDeltaRule, token by token) for T tokens, T a DynInt up
/// to max_T (replays of a recorded pass run the same recording with another T). State
/// [n_v_heads][dv][dk] f32 read from state_in and written to state_out (may be the same);
/// state0_record (optional) receives state_in. q, k: k-head hk of token t at q[t*ldq + hk*dk];
/// v: [t*ldv + hv*dv]; g, beta: [t*ldg + hv]; out: [t*ldo + hv*dv]. dk, dv in [1, 256].
/// Eight invocations share a state row (its dk entries in their registers for all T tokens).
struct GdnArgs {
  DynInt T;
  int64_t max_T = 1;
  int n_k_heads = 1, n_v_heads = 1;
  int64_t dk = 0, dv = 0;
  BufferView q, k, v;
  int64_t ldq = 0, ldk = 0, ldv = 0;
  BufferView g, beta;
  int64_t ldg = 0;
  BufferView state_in, state_out, state0_record;
  BufferView out;
  int64_t ldo = 0;
  float scale = 0.0f;  ///< 0 = 1/sqrt(dk)
};
void GatedDeltaRule(CommandList& cl, const GdnArgs& a);

// ---------------------------------------------------------------------------------------------
// Attention.

/// Rows t < n_tokens of k and v (f32, ldk / ldv) to rows pos0 + t of the f16 caches (row_elems
/// halves per row, at least n_ctx rows), rounded to nearest even.
void KvWrite(CommandList& cl, BufferView k, int64_t ldk, BufferView v, int64_t ldv,
             int64_t n_tokens, int64_t row_elems, DynInt pos0, BufferView k_cache,
             BufferView v_cache, int64_t n_ctx);

/// Attention of T queries over an f16 KV cache (kernels::Attention): query t sees keys
/// [0, causal ? n_past + t + 1 : n_past + T); GQA head h reads kv head h / (n_head /
/// n_head_kv). Flash form split over n_splits ranges of the keys (each of
/// ceil(kv_len / n_splits) keys at run time) and a combining pass, which also applies the
/// output gate: out *= sigmoid(gate) when gate is valid (gate head h of token t at
/// gate[t*ld_gate + h*gate_hs]). scratch: AttentionScratchFloats floats.
struct AttentionArgs {
  BufferView q;
  int64_t ldq = 0, q_hs = 0;
  BufferView k_cache, v_cache;
  int64_t kv_row = 0;  ///< halves between cache rows (n_head_kv * head_dim usually)
  int64_t n_ctx = 0;   ///< rows in the caches
  int64_t T = 1;
  DynInt n_past;
  int n_head = 1, n_head_kv = 1;
  int64_t head_dim = 0;  ///< <= 256
  float scale = 0.0f;    ///< 0 = 1/sqrt(head_dim)
  bool causal = true;
  BufferView gate;
  int64_t ld_gate = 0, gate_hs = 0;
  BufferView out;
  int64_t ldo = 0, out_hs = 0;
  int n_splits = 1;
  BufferView scratch;
};
int64_t AttentionScratchFloats(int64_t T, int n_head, int n_splits, int64_t head_dim);
/// A split count for contexts up to max_kv: about one split per 512 keys, at most 32.
int AttentionSplitsFor(int64_t max_kv);
void Attention(CommandList& cl, const AttentionArgs& a);

// ---------------------------------------------------------------------------------------------
// Sampling support: only ids and probabilities come back to the host.

/// Per row r < n_rows of logits (row at r * ld, n_vocab values): the k largest logits (ties:
/// lower id) in descending order -> ids [r*k + i], values [r*k + i]; probs [r*k + i] =
/// softmax(logits / temperature) at those ids over the whole row; stats [2r] = max logit,
/// [2r+1] = sum over the row of exp((l - max) / temperature). k <= 64; k = 1 is argmax.
/// temperature > 0 (use 1 for greedy). scratch: TopKScratchFloats floats.
struct TopKArgs {
  BufferView logits;
  int64_t ld = 0;
  int64_t n_rows = 1;
  int64_t n_vocab = 0;
  int k = 1;
  float temperature = 1.0f;
  BufferView scratch;
  BufferView ids, values, probs, stats;
};
int64_t TopKScratchFloats(int64_t n_rows, int64_t n_vocab, int k);
void TopK(CommandList& cl, const TopKArgs& a);

// ---------------------------------------------------------------------------------------------
// Benchmark helper.

/// Reads `src` (a multiple of 16 bytes) with `groups` workgroups and writes one float per
/// workgroup to out (sums, so the reads cannot be optimized away): read-bandwidth probe.
void ReadProbe(CommandList& cl, BufferView src, BufferView out, uint32_t groups);

/// Fills a weight view of `type` (F32, F16, BF16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K; whole blocks
/// from its start) with hash noise from `seed`: small finite values (floats in [-0.05, 0.05),
/// block scales in [2^-10, 2^-9)). For speed tests of models too large to carry as files.
void SynthWeights(CommandList& cl, GgmlType type, BufferView v, uint32_t seed);

}  // namespace crossword::vulkan
