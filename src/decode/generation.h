// One request's decoding as a step-wise state machine over the model's forward pass: prefill,
// then AR, block-diffusion (LowConfidence) or lossless self-speculative steps (docs/decoding.md).
// A scheduler batches NextInput() of many generations into one Executor::Forward.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "decode/constraint.h"
#include "decode/draft_control.h"
#include "decode/sampling.h"
#include "model/model.h"

namespace crossword::decode {

enum class Mode : uint8_t { kAr, kDiffusion, kSpec };
/// "ar" | "diffusion" | "spec"; otherwise throws crossword::Error "WHAT must be ar, diffusion or
/// spec (got 'NAME')", where `what` names the source (a flag such as "--mode").
Mode ParseMode(std::string_view name, std::string_view what = "the decoding mode");
std::string_view ModeName(Mode mode);

/// Clover's long-generation logit biases (docs/decoding.md): value x clamp((t - start) / window,
/// 0, 1) where t = tokens generated before the predicted position.
struct RampBias {
  float value = 0.0f;
  int64_t start = 0;
  int64_t window = 1;
  float At(int64_t t) const;
};

/// Largest spec draft (drafts per round) any flag or request may ask for.
inline constexpr int kMaxDraft = 255;
/// DecodeOverrides::draft_max value of `--draft-max auto` (DecodeParams::draft_auto).
inline constexpr int kDraftAuto = -1;
/// DecodeParams::verify_chunk value of `--verify-chunk auto`.
inline constexpr int kVerifyChunkAuto = -1;

struct DecodeParams {
  Mode mode = Mode::kAr;
  int block_size = 32;      ///< diffusion block / spec draft length B (>= 2)
  float threshold = 0.95f;  ///< diffusion commit threshold τ in (0, 1]
  /// Spec: drafts per round at most, in [0, kMaxDraft]; a round drafts [seed, MASK x d] in one
  /// denoise pass with d = min(draft_max, block_size - 1) (0: block_size - 1). As llama.cpp's
  /// --draft-max.
  int draft_max = 0;
  /// Spec (`--draft-max auto`): pick each round's drafts in [0, max] (max as above) to maximize
  /// expected tokens per second from the acceptance and the pass costs seen so far in this
  /// generation, or carried from an earlier one (Generation::CarryDraftControl; DraftControl);
  /// 0 drafts make the round one AR step. Output is unchanged.
  bool draft_auto = false;
  /// Spec: the draft pass's mask rows route only among the seed's experts
  /// (SequenceInput::expert_anchor_rows = 1), so a draft reads no more expert bytes than an AR
  /// step. Output is unchanged (verification is exact); acceptance may drop.
  bool draft_expert_budget = false;
  /// Spec: the draft pass skips the FFN blocks of these layers (bit l: layer l, below the last;
  /// SequenceInput::skip_ffn_layers) on executors that can (Executor::skips_ffn()): a cheaper,
  /// rougher draft. Output is unchanged (verification is exact); acceptance may drop. 0: none.
  /// docs/decoding.md, "Draft passes that skip FFN blocks".
  uint64_t draft_skip_ffn = 0;
  /// Diffusion and spec (lossless; docs/decoding.md, "Fused passes"): a commit (verify) pass also
  /// runs the next block's first denoise (draft) pass as its tail (SequenceInput::denoise_tail),
  /// with the next seed guessed from the last row of the block's last denoise (draft) pass; the
  /// tail's result is used only when the guess was the real seed (spec: and every draft was
  /// accepted), otherwise the next block runs its own pass. Ignored in AR mode, with draft_auto,
  /// draft_expert_budget, a grammar, spec's draft_skip_ffn (a fused tail is a full denoise
  /// pass), and on executors without fused passes. Output is unchanged.
  bool fuse_passes = false;
  /// Spec: the verify pass takes the seed and the leading drafts whose slot confidence (softmax
  /// probability of the slot's best non-mask token, full vocabulary, after penalties and biases)
  /// is >= draft_p_min, in [0, 1]; 0 verifies every draft.
  /// Output is unchanged (verification stays exact); only the verify pass gets shorter
  /// (llama.cpp's --draft-p-min, which stops a sequential draft at its first unsure token).
  float draft_p_min = 0.0f;
  /// Spec (lossless; docs/decoding.md, "Fewer head rows"): a verify pass computes the logits of
  /// its first `verify_chunk` rows only, and those of the other rows (Executor::MoreLogits, after
  /// the pass) only when every draft of the first chunk was accepted. 0: every row in the pass;
  /// kVerifyChunkAuto: the first chunk is chosen per round from this generation's acceptance
  /// (FirstVerifyChunk). Off with fused passes and on executors without MoreLogits. The caller
  /// delivers the further rows (DeliverLogits). Output and acceptance are unchanged.
  int verify_chunk = 0;
  int64_t max_tokens = 256;  ///< generated tokens at most (>= 1)
  SamplingParams sampling;
  int64_t prefill_chunk = 512;  ///< prompt tokens per forward pass
  // Token ids the decoder needs (the engine fills them from the tokenizer).
  std::vector<int32_t> eog_ids;  ///< end-of-generation tokens (not emitted)
  int32_t mask_id = -1;          ///< required for diffusion / spec
  int32_t eos_id = -1;           ///< target of the length bias
  int32_t think_end_id = -1;     ///< `</think>`: target of the think-end bias
  int32_t think_start_id = -1;   ///< `<think>`
  bool think_open = false;       ///< the prompt ends inside an open think block
  /// Clover defaults (generation_config): length 10 @ 8192 + 8192, think-end 10 @ 4096 + 4096.
  bool dllm_biases = false;
  RampBias length_bias{10.0f, 8192, 8192};
  RampBias think_end_bias{10.0f, 4096, 4096};
  /// Structured output: every emitted token must keep the output a prefix of the grammar's
  /// language, and the answer ends (EOG) only where the grammar can end. With think_open and
  /// think_end_id >= 0 the grammar starts after `</think>` (the reasoning stays free text).
  /// Null: unconstrained. In every mode (docs/decoding.md, "Constrained decoding").
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
};

enum class FinishReason : uint8_t { kNone, kStop, kLength, kCancelled };
std::string_view FinishReasonName(FinishReason reason);

/// How CheckDecodeRanges names a parameter: as a command-line flag ("--draft-max") or as a
/// DecodeParams / API field ("draft_max").
enum class ParamNames : uint8_t { kFlags, kFields };

/// Throws crossword::Error, naming the parameter, when block_size is not in [2, 256], threshold
/// not in (0, 1], draft_max not in [0, kMaxDraft], draft_p_min not in [0, 1] (NaN included) or
/// verify_chunk not in [0, 256] or kVerifyChunkAuto.
/// The one place these ranges live: the CLI, the server and Generation all call it.
void CheckDecodeRanges(const DecodeParams& p, ParamNames names);

/// For spec with a fixed draft_max above block_size - 1 (a round drafts into one block, so it
/// drafts block_size - 1 at most): the note saying so in the flags' names, for the load log of
/// `run` and `serve`; "" otherwise.
std::string DraftCapNote(const DecodeParams& p);

/// The decoding settings a user picks over a model's defaults: the flags of `run` and `serve`
/// (--mode, --block-size, --threshold, --draft-max, --draft-p-min and the sampling defaults
/// --temp, --top-k, --top-p, --min-p, --seed and the penalties), held once for both.
struct DecodeOverrides {
  std::string mode = "ar";          ///< ar | diffusion | spec
  std::optional<int> block_size;    ///< tokens; unset: the model's (0 is out of range)
  std::optional<double> threshold;  ///< unset: the model's (0 is out of range, not "default")
  /// Spec drafts per round at most; unset: the engine's (15); kDraftAuto: `auto` (adaptive).
  std::optional<int> draft_max;
  std::optional<double> draft_p_min;  ///< spec verify cut; unset: the engine's (0)
  /// Spec verify's first logit chunk; unset: the engine's (auto); kVerifyChunkAuto: auto.
  std::optional<int> verify_chunk;
  bool draft_expert_budget = false;        ///< spec drafts route among the seed's experts only
  std::optional<uint64_t> draft_skip_ffn;  ///< spec drafts skip these layers' FFN blocks
  bool fuse_passes = false;                ///< commit/verify passes carry the next first pass
  // Sampling defaults (unset: the model's; llama.cpp's flag meanings).
  std::optional<double> temperature, top_p, min_p, presence, frequency, repeat;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  /// --seed -1: `seed` holds a random value drawn at startup (one generation's seed in `run`),
  /// and `serve` draws one per request instead, as llama-server does.
  bool random_seed = false;

  /// `p` with these settings over it. Throws crossword::Error naming --mode on an unknown mode;
  /// the ranges are left to CheckDecodeRanges, so that a caller can check before a model's
  /// defaults exist.
  DecodeParams Apply(DecodeParams p) const;
};

/// Counters and timings of one generation (seconds; passes exclude prefill unless named).
struct DecodeStats {
  int64_t prompt_tokens = 0;  ///< prompt tokens prefilled in this generation (cached ones excluded)
  int64_t generated = 0;      ///< tokens emitted (EOG excluded)
  int64_t prefill_passes = 0;
  int64_t ar_passes = 0;               ///< AR steps
  int64_t denoise_passes = 0;          ///< diffusion denoise passes and spec drafts
  int64_t commit_passes = 0;           ///< diffusion commit passes and spec verify passes
  int64_t rounds = 0;                  ///< spec rounds / diffusion blocks
  std::vector<int64_t> accepted_hist;  ///< spec: rounds that accepted k drafts (index k)
  int64_t verify_rows = 0;             ///< spec: tokens of all verify passes (seed + drafts kept)
  /// Spec: logit rows the verify passes computed (fewer than verify_rows with chunks), and the
  /// further chunks asked for after a pass (Executor::MoreLogits calls).
  int64_t verify_logit_rows = 0, verify_more_calls = 0;
  /// Spec: rounds whose draft ended at a drafted end of generation (their verify pass skipped
  /// the rows after it).
  int64_t draft_eog_cuts = 0;
  int64_t fused_passes = 0;  ///< commit/verify passes that carried the next block's first pass
  int64_t fused_hits = 0;    ///< ... whose tail was used (the pass it replaced did not run)
  double prefill_seconds = 0, ar_seconds = 0, denoise_seconds = 0, commit_seconds = 0;
  double first_token_seconds = 0;  ///< from Start() to the first emitted token
  /// Distinct routed experts per MoE layer summed over the passes of each kind (the expert union
  /// U; divide by the pass count), as reported with NotePassExperts.
  double prefill_experts = 0, ar_experts = 0, denoise_experts = 0, commit_experts = 0;
  int64_t grammar_masks = 0;   ///< structured output: allowed-token masks computed
  double grammar_seconds = 0;  ///< ... and the time they took
  int64_t forward_passes() const { return ar_passes + denoise_passes + commit_passes; }
  /// Tokens per forward pass after prefill (commit passes counted).
  double tokens_per_pass() const;
  /// Mean drafts accepted per spec round (bonus excluded).
  double mean_accepted() const;
};

/// Receives each emitted token in order; return false to stop (stop string matched, client
/// gone): the generation then finishes with kCancelled.
using TokenSink = std::function<bool(int32_t token)>;

/// A single sequence's decoding. Usage: Start(); while (!done()) { in = NextInput();
/// executor.Forward({in, ...}, ctx); OnLogits(ctx.logits(i)); }. The state must not be used by
/// anything else meanwhile. Allocates at construction only (n_vocab-sized buffers).
class Generation {
 public:
  /// `state` holds a prefix of `prompt` already (n_past < prompt.size(), same tokens — the
  /// engine's prompt cache guarantees it); the rest is prefilled. Throws crossword::Error on bad
  /// params (block size, threshold, max_tokens, missing mask id for diffusion/spec, a state
  /// without room for one block of scratch or without recording room for spec).
  Generation(const model::Model& model, model::SequenceState& state, std::vector<int32_t> prompt,
             DecodeParams params, TokenSink sink);

  bool done() const { return phase_ == Phase::kDone; }
  FinishReason finish_reason() const { return finish_; }
  const DecodeStats& stats() const { return stats_; }
  /// The draft-length controller of `--draft-max auto` (tests: what it has measured).
  const DraftControl& draft_control() const { return draft_control_; }
  /// Greedy spec with draft_auto, before the first round: the draft-length controller starts from
  /// `carried` (an earlier generation's CarriedDraftControl()) instead of its priors; the output
  /// is unchanged (only the draft lengths move). Ignored otherwise: a sampled request's draft
  /// lengths decide its random draws, so they follow its own tokens only (a seed reproduces it).
  void CarryDraftControl(const DraftControl& carried) {
    if (CarriesDraftControl() && stats_.rounds == 0) draft_control_ = carried;
  }
  /// What CarryDraftControl takes for the next generation (DraftControl::Carried): set for a
  /// greedy spec generation with draft_auto that ran a round. Under a grammar neither: its masks
  /// make every row dearer, a curve that would keep the next request from drafting.
  std::optional<DraftControl> CarriedDraftControl() const {
    if (!CarriesDraftControl() || stats_.rounds == 0) return std::nullopt;
    return draft_control_.Carried();
  }
  /// Host threads for the per-row scans of a pass's logits (a greedy denoise pass's candidates
  /// and confidences; model::Executor::host_pool), used between passes only; null (the
  /// default): the calling thread. The output does not depend on it.
  void SetHostPool(ThreadPool* pool) { host_pool_ = pool; }
  const DecodeParams& params() const { return params_; }
  /// Emitted tokens so far.
  const std::vector<int32_t>& output() const { return output_; }
  /// Diffusion/spec: the current block's tokens and which slots are still masked (for tests
  /// and tracing; the mask id stands in masked slots).
  std::span<const int32_t> block() const { return block_; }
  std::span<const uint8_t> masked() const { return masked_; }

  /// The next forward-pass input of this sequence (valid until OnLogits).
  model::SequenceInput NextInput();
  /// Consumes the logits of the pass NextInput() described (rows as it requested). A chunked
  /// verify pass may then want more rows (wants_more_logits()).
  void OnLogits(std::span<const float> logits);
  /// After OnLogits / OnMoreLogits: whether the verify pass needs the logits of
  /// more_logit_rows() (Executor::MoreLogits on the same context) before anything else.
  bool wants_more_logits() const { return wants_more_; }
  /// The rows [begin, end) wanted.
  std::pair<int64_t, int64_t> more_logit_rows() const { return {verify_ready_, verify_len_}; }
  /// Consumes the pass's logits again, the wanted rows now computed (the layout of OnLogits).
  void OnMoreLogits(std::span<const float> logits);
  /// Ends the generation now (client cancelled).
  void Cancel();
  /// Optional, before OnLogits: the pass used `per_layer` distinct routed experts per MoE layer
  /// (ForwardContext::experts_used() / moe_layers(); for a batch, the batch's), added to the
  /// stats of the pass's kind.
  void NotePassExperts(double per_layer) { pass_experts_ = per_layer; }

 private:
  enum class Phase : uint8_t { kPrefill, kAr, kDenoise, kCommit, kDraft, kVerify, kDone };
  using Clock = std::chrono::steady_clock;

  // The one logit-processing step: `row` with penalties and biases for the predicted token's
  // index `t` among generated ones, then the constraint's mask at the slot's prefix (the
  // constraint stands at that position; null: unconstrained). Returns scratch valid until the
  // next call.
  std::span<float> Processed(std::span<const float> row, int64_t t, TokenConstraint* c);
  // Processed for a reader: `row` itself when processing would change no logit (no penalty or
  // logit bias, no constraint, the biases 0 at t), which spares a copy of the row per masked slot
  // and pass (31 rows of 16 KB per denoise pass of the embedded model).
  std::span<const float> ProcessedView(std::span<const float> row, int64_t t, TokenConstraint* c);
  // Whether processing leaves the row of generated index t unchanged without a constraint
  // (ProcessedView then returns the row itself, touching no member: safe on any thread).
  bool ReadsInPlace(int64_t t) const;
  // A denoise pass's candidates for the masked slots j0, j0 + step, ... below j1 (greedy, rows
  // read in place): cand[j] = (argmax without the mask token, confidence); returns the first of
  // those slots with the largest confidence, and that confidence (slot -1 when none is masked). A
  // confidence below both the threshold and the range's best so far may be a bound from a partial
  // sum (SoftmaxProbAbove); one that reaches either is exact, so the commits and the best are those
  // of exact confidences.
  struct Best {
    int64_t slot = -1;
    float conf = -1.0f;
  };
  Best GreedyCandidates(std::span<const float> logits, int64_t j0, int64_t step, int64_t j1,
                        std::span<std::pair<int32_t, float>> cand) const;
  // Greedy or sampled choice from the processed row (the emitted prefix's constraint).
  int32_t Choose(std::span<const float> row, int64_t t);
  bool Emit(int32_t token);  // false when generation ended (EOG, length, sink)
  void StartBlock(int32_t seed);
  void Finish(FinishReason reason);
  bool IsEog(int32_t token) const;
  // Cuts a diffusion block after its first slot holding a committed end-of-generation token.
  // Committed slots keep their tokens, so the answer ends at or before that slot: the slots after
  // it would never be emitted, and the later passes run over the block up to it only
  // (docs/decoding.md, block diffusion step 2).
  void CutAtEnd();
  void OnPrefill(std::span<const float> logits);
  void OnDenoise(std::span<const float> logits);
  void OnDenoiseConstrained(std::span<const float> logits);
  void OnDraft(std::span<const float> logits);
  void OnVerify(std::span<const float> logits);
  // Verification of one spec round: fills `accepted` (drafts emitted) and returns the bonus
  // token (the next seed) or -1 when the generation ended.
  // Both go on from row verify_row_ and return kNeedRows (saving the row) at the first row
  // whose logits are not computed yet (verify_ready_).
  int32_t VerifyGreedy(std::span<const float> logits, int64_t& accepted);
  int32_t VerifySampled(std::span<const float> logits, int64_t& accepted);
  static constexpr int32_t kNeedRows = -2;
  // Chunked verify: logit rows of the first chunk of a verify pass of V rows.
  int64_t FirstVerifyChunk(int64_t V) const;
  // Emits an accepted draft; false when the generation ended, counting a draft that was
  // emitted before the end (length, sink) as accepted.
  bool EmitDraft(int32_t token, int64_t& accepted);
  void AccountPass(double seconds);
  // Whether draft_control_ learns pass times. Only greedy requests: with sampling, the draft
  // lengths decide which random draws speculative sampling makes, so timings would make a seeded
  // request irreproducible; sampled requests keep DraftControl's prior cost curve, and their
  // draft lengths follow their tokens only.
  bool TimesDrafts() const { return params_.draft_auto && params_.sampling.greedy(); }
  bool CarriesDraftControl() const {
    return params_.mode == Mode::kSpec && TimesDrafts() && !params_.grammar;
  }
  // DraftControl::OnPass for the pending draft or verify pass: the time from NextInput to now,
  // which is the pass and what its logits cost here (the rows' processing, further verify rows,
  // the rollback), so the draft length weighs a round's whole cost, not the forward pass alone.
  void TimeRound();
  // Tokens of a block started after `generated` tokens were emitted (spec: draft_max; the answer
  // limit; not draft_auto).
  int64_t BlockLen(int64_t generated) const;
  // Fused passes: the guess of the token after the block from its row `row` (penalty index t);
  // -1 (no tail) when it is an end of generation.
  int32_t Guess(std::span<const float> logits, int64_t row, int64_t t);
  // Fused passes: after StartBlock, the tail's logits (`tail` rows computed for [guess, MASK..])
  // stand for the block's first pass when the seed is `guess` and the block has `tail` slots.
  void UseTail(std::span<const float> logits, int64_t tail, int32_t guess);

  const model::Model& model_;
  model::SequenceState& state_;
  std::vector<int32_t> prompt_;
  DecodeParams params_;
  TokenSink sink_;
  Sampler sampler_;
  TokenHistory history_;
  int64_t n_vocab_;
  Phase phase_ = Phase::kPrefill;
  FinishReason finish_ = FinishReason::kNone;
  DecodeStats stats_;
  std::vector<int32_t> output_;
  std::vector<int32_t> input_;   // tokens of the pending pass
  std::vector<int32_t> block_;   // diffusion/spec block tokens
  std::vector<uint8_t> masked_;  // diffusion: slot still masked
  std::vector<uint8_t> need_;    // denoise/draft pass: rows whose logits are read (need_rows)
  int64_t block_emitted_ = 0;    // diffusion: leading slots already emitted
  int64_t block_len_ = 0;
  int64_t verify_len_ = 0;  // spec: rows of the verify pass (seed + kept drafts)
  // Spec: the answer index of the end of generation the last draft ended at (-1: none), and the
  // last verified round's (greedy: the next drafts' cap while it lies ahead of the seed).
  int64_t draft_end_ = -1, end_ahead_ = -1;
  // Chunked verify (params_.verify_chunk): rows whose logits are computed, the next row to check,
  // drafts accepted so far, the penalty index of the seed, whether the rest is wanted, and the
  // accepted counts of earlier rounds with drafts (index: drafts accepted).
  int64_t verify_ready_ = 0, verify_row_ = 0, verify_accepted_ = 0, verify_gen0_ = 0;
  bool wants_more_ = false;  // the rest of the verify rows, [verify_ready_, verify_len_)
  bool chunk_verify_ = false;
  std::vector<int64_t> verify_hist_;
  std::vector<float> row_;  // processed logits scratch (n_vocab)
  ThreadPool* host_pool_ = nullptr;
  std::vector<std::vector<std::pair<int32_t, float>>> draft_dist_;  // spec sampling: q per slot
  std::vector<std::pair<int32_t, float>> verify_dist_;              // spec sampling: p of a row
  std::vector<std::pair<int32_t, float>> residual_;                 // spec sampling: max(0, p - q)
  std::unique_ptr<TokenConstraint> constraint_;  // structured output (params_.grammar)
  int64_t limit_ = 0;  // answer tokens at most: min(max_tokens, n_ctx - prompt)
  bool think_open_ = false;
  int32_t pending_ = -1;        // AR: token to feed next
  DraftControl draft_control_;  // spec with draft_auto
  double pass_experts_ = 0;     // NotePassExperts of the pending pass
  bool fuse_ = false;           // params_.fuse_passes where it applies
  int32_t guess_ = -1;          // fused passes: guessed seed of the next block (-1: none)
  int64_t tail_len_ = 0;        // fused passes: tail tokens of the pending pass
  Clock::time_point start_, pass_start_;
  // `--draft-max auto` (TimesDrafts): a draft or verify pass of timed_rows_ rows began at
  // round_start_; TimeRound hands DraftControl its time when the pass's work is done.
  Clock::time_point round_start_;
  int64_t timed_rows_ = 0;
};

/// Hands sequence `s` of the pass just run on `ctx` to `gen`: OnLogits, then, while a chunked
/// verify wants more rows, ctx.executor().MoreLogits and OnMoreLogits. Every driver of a
/// Generation calls this after Forward (the engine, the server's scheduler, tests).
void DeliverLogits(Generation& gen, model::ForwardContext& ctx, int s);

}  // namespace crossword::decode
