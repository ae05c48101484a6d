// Public compute kernels of crossword: matrix products over GGUF weights, norms, rope, softmax,
// attention, the gated delta rule, causal conv1d and routing. Each entry point dispatches at run
// time to the best Highway target (AVX3_DL/VNNI, AVX3, AVX2, portable); ref.h has the twins.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "core/types.h"

namespace crossword::kernels {

/// A 2-D weight in GGUF layout: n_out rows of n_in elements of `type`; row r starts at
/// data + r * row_bytes (row_bytes >= RowBytes(type, n_in); GGUF tensors have it equal).
/// GGUF shape {n_in, n_out} (ne0 = n_in). The memory is not owned (usually the mmap'ed file).
struct Matrix {
  GgmlType type = GgmlType::kF32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  const void* data = nullptr;
  size_t row_bytes = 0;
  /// Optional copy of the same weights in the multi-row kernel's tile layout, written by Repack
  /// (not owned); nullptr = multi-row products repack on the fly. Results are identical either way.
  const void* packed = nullptr;
};

/// Bytes of the tile layout Repack writes for `w`, 0 when this CPU's kernels have none for
/// w.type. Today, on AVX-512 VNNI: Q8_0 (576 bytes per 16 rows x 32 columns, about 1.06x its
/// size), Q4_0 (288 bytes per 16 x 32: its size) and Q4_K / Q5_K / Q6_K (per 16 rows x 2048
/// columns one unpacked tile: Q6_K 1.33x its size). Products of 4 or more activation rows read it
/// instead of repacking each 16-row tile on every call (llama.cpp's CPU "repack" buffers do the
/// same), and so do Q8_0 and Q4_0 products of 1-3 rows; the K-quants' products of 1-3 rows read
/// the file's rows (fewer bytes).
size_t RepackedBytes(const Matrix& w);

/// Writes `w` in the tile layout to `out` (RepackedBytes(w) > 0 bytes, 64-byte aligned); set
/// w.packed = out afterwards. Throws crossword::Error when RepackedBytes(w) is 0 or out is
/// misaligned.
void Repack(const Matrix& w, void* out);

/// The format an activation row is converted to before a dot product with a weight type.
/// The integer formats store per row: int8 quants (n_in), one float scale per block, and block
/// sums: kQ8_0 one int32 per block = -128 * (sum of its 32 quants) (the correction term of the
/// unsigned-offset VNNI dot), kQ8_K one int16 per 16 quants (llama.cpp's bsums).
enum class ActFormat : uint8_t {
  kF32,   ///< F32 weights: plain floats.
  kF16,   ///< x rounded to binary16 (available; F16 weights use kF32, see ActFormatFor).
  kBF16,  ///< BF16 weights: x rounded to bfloat16 (as llama.cpp's vec_dot_bf16).
  kQ8_0,  ///< Q8_0/Q4_0: blocks of 32, d = amax/127 (fp16), q = nearest-even(x*127/amax) (x86 ggml)
  kQ8_K,  ///< Q4_K/Q5_K/Q6_K weights: blocks of 256, llama.cpp quantize_row_q8_K (d = max/-127).
};

/// The activation format the dot products of `weight_type` consume. F16 weights take f32
/// activations (llama.cpp rounds them to f16 for multi-row products but not for single rows; one
/// format for every batch size keeps results batch-invariant, which lossless speculation needs,
/// and f32 is the more accurate of the two). Throws crossword::Error for
/// weight types without a kernel (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K).
ActFormat ActFormatFor(GgmlType weight_type);

/// Activation rows converted once into what a weight type's dot product consumes, so several
/// matrices with the same input share one conversion. Reserve() allocates (call at load time);
/// PrepareActivations() never allocates. Movable, not copyable.
class Activations {
 public:
  Activations() = default;
  Activations(const Activations&) = delete;
  Activations& operator=(const Activations&) = delete;
  Activations(Activations&&) = default;
  Activations& operator=(Activations&&) = default;

  /// Allocates room for up to `max_rows` rows of up to `max_n_in` elements in any format.
  /// Throws crossword::Error on negative sizes.
  void Reserve(int64_t max_rows, int64_t max_n_in);

  ActFormat format() const { return format_; }
  int64_t n_rows() const { return n_rows_; }
  int64_t n_in() const { return n_in_; }

  // --- layout accessors (used by the kernels and tests) ---
  /// Bytes between consecutive rows in data() (a multiple of 64).
  size_t row_stride() const { return row_stride_; }
  /// kF32: float[n_in]; kF16/kBF16: uint16_t[n_in]; integer formats: int8_t[n_in] quants,
  /// then (at scale_offset()) float[n_in / block], then (at sums_offset()) the block sums (see
  /// ActFormat); kQ8_K then (at biased_offset()) the quants + 128 as uint8_t[n_in], for kernels
  /// whose weights are vpdpbusd's signed operand (ref::ActLayout).
  const uint8_t* row(int64_t r) const { return data_ + static_cast<size_t>(r) * row_stride_; }
  uint8_t* mutable_row(int64_t r) { return data_ + static_cast<size_t>(r) * row_stride_; }
  size_t scale_offset() const { return scale_offset_; }
  size_t sums_offset() const { return sums_offset_; }
  size_t biased_offset() const { return biased_offset_; }

  /// Sets the shape/format without converting (used by PrepareActivations and tests).
  /// Throws crossword::Error if the reservation is too small or n_in is not a multiple of the
  /// format's block size.
  void SetShape(ActFormat format, int64_t n_rows, int64_t n_in);

 private:
  std::vector<uint8_t> storage_;
  uint8_t* data_ = nullptr;  // 64-byte aligned into storage_
  size_t capacity_ = 0;      // bytes usable from data_
  ActFormat format_ = ActFormat::kF32;
  int64_t n_rows_ = 0;
  int64_t n_in_ = 0;
  size_t row_stride_ = 0;
  size_t scale_offset_ = 0;
  size_t sums_offset_ = 0;
  size_t biased_offset_ = 0;
};

/// out[i] = x[i] as binary16 bits, i < n, rounded to nearest even: the bits of base/fp16.h's
/// F32ToF16 (NaN quieted, overflow to infinity, subnormals rounded), vectorized (vcvtps2ph on
/// x86-64). For the F16 KV cache's rows.
void F32ToF16Row(const float* x, int64_t n, uint16_t* out);

/// Converts rows x[r * ldx + k] (r < n_rows, k < n_in) into the format of `weight_type`'s dot
/// product. Parallel over rows when n_rows > 1. Throws crossword::Error if `out` was not
/// reserved large enough, n_in is not a multiple of the weight type's block size, or the type
/// has no kernel. Never allocates.
void PrepareActivations(GgmlType weight_type, const float* x, int64_t n_rows, int64_t n_in,
                        int64_t ldx, Activations& out, ThreadPool& pool);

/// One product y[y_row(i)][o] = sum_k W[o][k] * x[x_row(i)][k], i in [0, n_rows),
/// o in [0, w.n_out). x_rows / y_rows: optional index arrays (nullptr = identity) so MoE can
/// gather tokens per expert and scatter results to (token, slot) rows. y rows have stride ldy
/// floats (>= w.n_out). x must have been prepared for w.type with n_in == w.n_in.
struct MatMulJob {
  Matrix w;
  const Activations* x = nullptr;
  int64_t n_rows = 1;
  const int32_t* x_rows = nullptr;
  float* y = nullptr;
  int64_t ldy = 0;
  const int32_t* y_rows = nullptr;
};

/// Runs all jobs in ONE parallel region of the pool (e.g. the 4 projections of a GDN layer, or
/// gate+up of all selected experts). Results equal ref::MatMul up to float summation order
/// (integer block dot products are exact). Throws crossword::Error on shape/format mismatch
/// (named by job index). Never allocates.
void MatMul(std::span<const MatMulJob> jobs, ThreadPool& pool);

/// Convenience: one job, identity row maps.
void MatMul(const Matrix& w, const Activations& x, float* y, int64_t ldy, ThreadPool& pool);

// ---------------------------------------------------------------------------------------------
// Row operations (single thread; the model parallelizes across rows/heads if it wants).

/// y = x / sqrt(mean(x^2) + eps) * w over n elements (w may be null = 1). The sum of squares is
/// accumulated in double as ggml_compute_forward_rms_norm does. y may alias x.
void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps);
/// x *= 1 / max(sqrt(sum x^2), eps)  (ggml_l2_norm).
void L2Norm(float* x, int64_t n, float eps);
/// x = softmax(x) in place: subtract the max, exp, sum in double, multiply by 1/sum.
void Softmax(float* x, int64_t n);
/// Index of the largest of x[0, n) (ties: the lowest index), skipping index `exclude` (< 0:
/// none); -1 when no index is left. A row with a NaN gets the scalar twin's answer (its loop keeps
/// the first index and then any larger value; NaN compares greater than nothing). n >= 0. Used per
/// logit row by greedy decoding (the vocabulary, 4096 to 248,320 wide).
int64_t ArgMax(const float* x, int64_t n, int64_t exclude);
/// softmax(x)[i] for 0 <= i < n: exp(x[i] - max) / sum_j exp(x[j] - max), exp in float, the sum in
/// double (as Softmax). Diffusion's confidence of a slot's candidate, per masked row and pass.
float SoftmaxProb(const float* x, int64_t n, int64_t i);
/// SoftmaxProb(x, n, i), bit for bit, when that is >= `below`; otherwise a value in
/// [SoftmaxProb(x, n, i), below): the sum of exponentials (in SoftmaxProb's order) stops once the
/// probability of its partial sum is under `below`, and since partial sums only grow, so does
/// the exact one. For a decision "probability >= below" (diffusion's threshold) at a fraction of
/// the work on rows that fail it. NaN rows run to the end (NaN compares below nothing).
float SoftmaxProbAbove(const float* x, int64_t n, int64_t i, float below);
/// SoftmaxProbAbove with the row's maximum given (`max` = the largest of x[0, n), as an argmax
/// already found it), so it does not read the row once more for it: the same bits on a row
/// without NaN. A NaN `max` means unknown (then it reads the row for it).
float SoftmaxProbAbove(const float* x, int64_t n, int64_t i, float below, float max);
/// NeoX rope on the first n_rot dims of each head: pair (i, i + n_rot/2) rotates by theta_i =
/// pos * base^(-2i/n_rot), computed as ggml does (float theta_scale = powf(base, -2/n_rot),
/// theta multiplied by it once per pair, cos/sin in float). Dims >= n_rot are untouched.
/// x: n_head heads of head_dim floats, head h at x + h * head_stride. n_rot even, <= head_dim.
void RopeNeox(float* x, int64_t n_head, int64_t head_dim, int64_t head_stride, int n_rot,
              int64_t pos, float freq_base);

/// y = silu(gate) * up (ggml_swiglu_split). y may alias gate or up.
void SiluMul(const float* gate, const float* up, float* y, int64_t n);
/// y = a + b.
void Add(const float* a, const float* b, float* y, int64_t n);
/// y += s * x  (axpy; accumulating weighted expert outputs).
void AddScaled(const float* x, float s, float* y, int64_t n);
/// y = a * b (elementwise).
void Mul(const float* a, const float* b, float* y, int64_t n);
/// y = sum_j w[j] * x[j] (rows of n floats), the terms in order, each one multiply-add onto the
/// running sum from zero: the bits of zeroing y and then AddScaled(x[j], w[j], y, n) for every j
/// (the MoE's combine of its routed and shared experts' rows), in one pass. y must not alias any
/// x[j]. Throws crossword::Error when x and w differ in length.
void WeightedSum(std::span<const float* const> x, std::span<const float> w, float* y, int64_t n);
/// x *= s.
void Scale(float* x, float s, int64_t n);
/// y = 1 / (1 + exp(-x)).
void Sigmoid(const float* x, float* y, int64_t n);
/// y = x * sigmoid(x).
void Silu(const float* x, float* y, int64_t n);
/// y = x > 20 ? x : log1p(exp(x))  (ggml softplus).
void Softplus(const float* x, float* y, int64_t n);

/// Router: softmax over n_expert logits (as Softmax), top-k by probability (descending; ties ->
/// lower id), weights renormalized: p / max(sum of the k p, 6.103515625e-5). ids and weights
/// hold k entries. 1 <= k <= n_expert <= 1024, else crossword::Error.
void TopKSoftmax(const float* logits, int n_expert, int k, int32_t* ids, float* weights);

// ---------------------------------------------------------------------------------------------
// Sequence operations (parallel through the pool).

/// Flash-style attention for T queries of one sequence.
/// q: query t head h at q + t*ldq + h*q_head_stride (f32, head_dim values).
/// K/V caches: position p, kv head g at k + (p*ldk + g*head_dim) elements of kv_type (F16 or
/// F32); the same for v with ldv. Query t sees keys [0, kv_len(t)) where kv_len(t) =
/// causal ? n_past + t + 1 : n_past + T (bidirectional block). GQA: head h reads kv head
/// h / (n_head / n_head_kv). out: query t head h at out + t*ldo + h*out_head_stride.
/// Online softmax over chunks of keys (no scratch memory); parallel over (t, head).
struct AttentionArgs {
  const float* q = nullptr;
  int64_t ldq = 0;
  int64_t q_head_stride = 0;  ///< 0 = head_dim
  const void* k = nullptr;
  const void* v = nullptr;
  GgmlType kv_type = GgmlType::kF16;
  int64_t ldk = 0;  ///< elements between positions (usually n_head_kv * head_dim)
  int64_t ldv = 0;
  float* out = nullptr;
  int64_t ldo = 0;
  int64_t out_head_stride = 0;  ///< 0 = head_dim
  int64_t T = 1;
  int64_t n_past = 0;
  int n_head = 1;
  int n_head_kv = 1;
  int64_t head_dim = 0;  ///< <= 512
  float scale = 0.0f;    ///< 0 = 1/sqrt(head_dim)
  bool causal = true;
};
/// Throws crossword::Error on inconsistent arguments (names the field).
void Attention(const AttentionArgs& args, ThreadPool& pool);
/// The queries of tokens [t0, t1) of the same T-token call (kv_len(t) as above), every head, on
/// the calling thread: a row-split pass's block of rows (docs/pass-cost-log.md, "Pipelined row
/// blocks"). Each output row has the bits Attention gives it. Throws crossword::Error on
/// inconsistent arguments or a range outside [0, T].
void AttentionRows(const AttentionArgs& args, int64_t t0, int64_t t1);

/// How GatedDeltaRule evaluates T tokens.
enum class GdnMode : uint8_t {
  kAuto,       ///< chunked when T >= kGdnChunkThreshold, else recurrent
  kRecurrent,  ///< token by token (llama.cpp's fused CPU op)
  kChunked,    ///< WY / HF chunk algorithm, chunk 64 (same result up to rounding; dk, dv <= 128)
};
/// T at and above which kAuto picks the chunked form. On AVX-512 the token-by-token form
/// measured 2x faster than the chunked one at every T tried (64..512, docs/kernels.md): at
/// head size 128 the chunk algorithm does ~1.8x the multiply-adds, which only pays off with
/// matrix units. So kAuto stays recurrent until a faster chunked kernel lowers this.
inline constexpr int64_t kGdnChunkThreshold = INT64_MAX;

/// Gated delta rule (qwen35moe-notes.md 2.3 step 6) per v-head hv, reading k-head
/// hv % n_k_heads (GGUF tiled order). For each token t in order, with S = state[hv] (S[j][i]:
/// j value dim, i key dim):
///   S *= exp(g);  kv[j] = sum_i S[j][i] k[i];  d[j] = (v[j] - kv[j]) * beta;
///   S[j][i] += k[i] d[j];  o[j] = scale * sum_i S[j][i] q[i].
/// q, k: token t k-head hk at q + t*ldq + hk*dk (already L2-normalized). v: head hv at
/// v + t*ldv + hv*dv. g (log decay, <= 0) and beta: g[t*ldg + hv]. state: [n_v_heads][dv][dk]
/// f32, updated in place. out: token t head hv at out + t*ldo + hv*dv.
/// snapshots (optional): n_snapshots states [n_snapshots][n_v_heads][dv][dk]; slot s receives
/// the state after token T-1-s (slots with T-1-s < 0 are left untouched).
/// Parallel over v-heads. dk, dv <= 256. Throws crossword::Error on bad arguments.
struct GdnArgs {
  int64_t T = 1;
  int n_k_heads = 1;
  int n_v_heads = 1;
  int64_t dk = 0;
  int64_t dv = 0;
  const float* q = nullptr;
  int64_t ldq = 0;
  const float* k = nullptr;
  int64_t ldk = 0;
  const float* v = nullptr;
  int64_t ldv = 0;
  const float* g = nullptr;
  const float* beta = nullptr;
  int64_t ldg = 0;
  float* state = nullptr;
  float* out = nullptr;
  int64_t ldo = 0;
  float scale = 0.0f;  ///< 0 = 1/sqrt(dk)
  GdnMode mode = GdnMode::kAuto;
  float* snapshots = nullptr;
  int n_snapshots = 0;
};
void GatedDeltaRule(const GdnArgs& args, ThreadPool& pool);
/// GatedDeltaRule of v-head `hv` alone, on the calling thread (a pipelined row block hands its
/// state on head by head): the bits GatedDeltaRule gives that head. Throws crossword::Error on
/// inconsistent arguments or a head outside [0, n_v_heads).
void GatedDeltaRuleHead(const GdnArgs& args, int hv);

/// Causal depthwise conv1d + SiLU over C channels with kernel K:
/// X = concat(state [K-1][C], x [T][C]);  y[t][c] = silu(sum_j X[t+j][c] * w[c*K + j])
/// (w is GGUF ssm_conv1d {K, C}). x row t at x + t*ldx, y row t at y + t*ldy (y must not
/// overlap x or state). If update_state, state <- the last K-1 rows of X. Parallel over
/// channel blocks. Throws crossword::Error on bad arguments.
struct Conv1dArgs {
  const float* x = nullptr;
  int64_t ldx = 0;
  int64_t T = 1;
  int64_t C = 0;
  int K = 4;
  const float* w = nullptr;
  float* state = nullptr;
  float* y = nullptr;
  int64_t ldy = 0;
  bool update_state = true;
  /// Optional: the same weights tap-major, w_taps[j*C + c] = w[c*K + j] (ConvTapsMajor), which
  /// the SIMD kernel reads as they are; without them it transposes a channel block of w per call,
  /// which cost more than the conv itself in a one-row step (K*C scalar moves for K*C
  /// multiply-adds). Same bits either way (the same products and sums in the same order).
  const float* w_taps = nullptr;
};
void CausalConv1dSilu(const Conv1dArgs& args, ThreadPool& pool);
/// The tap-major copy of conv weights w {K, C} for Conv1dArgs::w_taps: [K][C] floats,
/// out[j*C + c] = w[c*K + j].
std::vector<float> ConvTapsMajor(std::span<const float> w, int64_t C, int K);

// ---------------------------------------------------------------------------------------------
// Targets (tests and benchmarks).

/// Name of the Highway target the dispatching entry points use now ("AVX3_DL", "AVX2", ...,
/// "SCALAR" for the portable fallback of Highway 1.0.3).
const char* CurrentTargetName();

/// Multiply-adds per second that this CPU's int8 dot-product instruction sustains on all of
/// `pool`'s threads at once: 512-bit vpdpbusd, 16 independent chains per thread, best of 5
/// timings of ~2 ms each (after one that wakes the threads). The instruction's throughput, so a
/// roof no int8 product kernel can pass (the cache-resident rate of the kernels themselves is below
/// it by their loads, scale arithmetic and call overheads). 0 where this build's products do not
/// use the instruction (CPUs without AVX-512 VNNI).
double Int8PeakRate(ThreadPool& pool);

/// Whether this CPU has AVX512_BF16 (vdpbf16ps), used by the BF16 path of the AVX3_DL target.
bool CpuHasAvx512Bf16();
/// Highway targets (bits of HWY_TARGETS) compiled into crossword_kernels that this CPU
/// supports, best first. The real CPU's list, not narrowed by ForceTargetForTest (it is
/// computed at the first call, which clears any mock: call it before forcing a target).
std::vector<int64_t> AvailableTargets();
/// Highway's name of a target bit ("AVX3_DL", "AVX3", "AVX2", "SCALAR").
const char* TargetName(int64_t target);
/// Tests and benchmarks only (not thread-safe): makes dispatch behave as if the CPU supported
/// only `target` (one of AvailableTargets()); 0 restores the real CPU.
void ForceTargetForTest(int64_t target);

namespace detail {
/// Tests only: the current target's pair-sum tree (src/kernels/pair_sum-inl.h, the reduction of
/// GDN's small heads and attention's key chunks) over N vectors of N floats, x[r * N + i] lane i of
/// vector r, where N is the target's float lane count (returned; at most 16): out[r] is the sum of
/// vector r's lanes.
int64_t PairSumTreeForTest(const float* x, float* out);
}  // namespace detail

}  // namespace crossword::kernels
