// Generation: the AR / block-diffusion / self-speculative state machine of docs/decoding.md.
#include "decode/generation.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "core/thread_pool.h"

namespace crossword::decode {

Mode ParseMode(std::string_view name, std::string_view what) {
  if (name == "ar") return Mode::kAr;
  if (name == "diffusion") return Mode::kDiffusion;
  if (name == "spec") return Mode::kSpec;
  Fail("{} must be ar, diffusion or spec (got '{}')", what, name);
}

std::string_view ModeName(Mode mode) {
  switch (mode) {
    case Mode::kAr:
      return "ar";
    case Mode::kDiffusion:
      return "diffusion";
    case Mode::kSpec:
      return "spec";
  }
  return "?";
}

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kNone:
      break;
  }
  return "none";
}

float RampBias::At(int64_t t) const {
  if (value == 0.0f || t <= start) return 0.0f;
  const double f =
      window <= 0 ? 1.0
                  : std::min(1.0, static_cast<double>(t - start) / static_cast<double>(window));
  return static_cast<float>(value * f);
}

double DecodeStats::tokens_per_pass() const {
  const int64_t n = forward_passes();
  return n == 0 ? 0.0 : static_cast<double>(generated) / static_cast<double>(n);
}

double DecodeStats::mean_accepted() const {
  int64_t rounds_n = 0, acc = 0;
  for (size_t k = 0; k < accepted_hist.size(); ++k) {
    rounds_n += accepted_hist[k];
    acc += accepted_hist[k] * static_cast<int64_t>(k);
  }
  return rounds_n == 0 ? 0.0 : static_cast<double>(acc) / static_cast<double>(rounds_n);
}

void CheckDecodeRanges(const DecodeParams& p, ParamNames names) {
  const bool flags = names == ParamNames::kFlags;
  if (p.block_size < 2 || p.block_size > 256) {
    Fail("{} must be in [2, 256] (got {})", flags ? "--block-size" : "block_size", p.block_size);
  }
  if (!(p.threshold > 0.0f && p.threshold <= 1.0f)) {
    Fail("{} must be in (0, 1] (got {})", flags ? "--threshold" : "threshold", p.threshold);
  }
  if (p.draft_max < 0 || p.draft_max > kMaxDraft) {
    Fail("{} must be in [0, {}] or auto (got {})", flags ? "--draft-max" : "draft_max", kMaxDraft,
         p.draft_max);
  }
  if (!(p.draft_p_min >= 0.0f && p.draft_p_min <= 1.0f)) {
    Fail("{} must be in [0, 1] (got {})", flags ? "--draft-p-min" : "draft_p_min", p.draft_p_min);
  }
  if (p.verify_chunk != kVerifyChunkAuto && (p.verify_chunk < 0 || p.verify_chunk > 256)) {
    Fail("{} must be in [0, 256] or auto (got {})", flags ? "--verify-chunk" : "verify_chunk",
         p.verify_chunk);
  }
}

std::string DraftCapNote(const DecodeParams& p) {
  if (p.mode != Mode::kSpec || p.draft_auto || p.draft_max <= p.block_size - 1) return "";
  return fmt::format(
      "spec's draft length {} (--draft-max) is above --block-size {} - 1: a round drafts {} "
      "tokens at most",
      p.draft_max, p.block_size, p.block_size - 1);
}

DecodeParams DecodeOverrides::Apply(DecodeParams p) const {
  p.mode = ParseMode(mode, "--mode");  // named after the flag, like the range errors
  if (block_size) p.block_size = *block_size;
  if (threshold) {
    // Checked as the double it is (converting a value beyond the float range is undefined), and
    // as the server says it: a positive value below the smallest float is not "got 0".
    if (!(*threshold > 0.0 && *threshold <= 1.0)) {
      Fail("--threshold must be in (0, 1] (got {})", *threshold);
    }
    if (static_cast<float>(*threshold) == 0.0f) {
      Fail("--threshold is 0 as a 32-bit float (got {}; the smallest is about 1.4e-45)",
           *threshold);
    }
    p.threshold = static_cast<float>(*threshold);
  }
  if (draft_expert_budget) p.draft_expert_budget = true;
  if (draft_skip_ffn) p.draft_skip_ffn = *draft_skip_ffn;
  if (fuse_passes) p.fuse_passes = true;
  if (draft_max) {
    p.draft_auto = *draft_max == kDraftAuto;
    if (*draft_max != kDraftAuto) p.draft_max = *draft_max;
  }
  if (draft_p_min) {
    if (!(*draft_p_min >= 0.0 && *draft_p_min <= 1.0)) {  // before the float conversion
      Fail("--draft-p-min must be in [0, 1] (got {})", *draft_p_min);
    }
    p.draft_p_min = static_cast<float>(*draft_p_min);
  }
  if (verify_chunk) p.verify_chunk = *verify_chunk;
  SamplingParams& s = p.sampling;
  if (temperature) s.temperature = static_cast<float>(*temperature);
  if (top_k) s.top_k = *top_k;
  if (top_p) s.top_p = static_cast<float>(*top_p);
  if (min_p) s.min_p = static_cast<float>(*min_p);
  if (seed) s.seed = *seed;
  if (presence) s.presence_penalty = static_cast<float>(*presence);
  if (frequency) s.frequency_penalty = static_cast<float>(*frequency);
  if (repeat) s.repetition_penalty = static_cast<float>(*repeat);
  return p;
}

Generation::Generation(const model::Model& model, model::SequenceState& state,
                       std::vector<int32_t> prompt, DecodeParams params, TokenSink sink)
    : model_(model),
      state_(state),
      prompt_(std::move(prompt)),
      params_(std::move(params)),
      sink_(std::move(sink)),
      sampler_(params_.sampling, model.hparams().n_vocab),
      n_vocab_(model.hparams().n_vocab) {
  if (prompt_.empty()) Fail("generation: the prompt is empty (at least one token is needed)");
  if (state_.n_past() >= static_cast<int64_t>(prompt_.size())) {
    Fail(
        "generation: the state already holds {} tokens of a {}-token prompt; at least the last "
        "prompt "
        "token must be evaluated",
        state_.n_past(), prompt_.size());
  }
  if (params_.max_tokens < 1)
    Fail("generation: max_tokens must be >= 1 (got {})", params_.max_tokens);
  if (params_.prefill_chunk < 1) Fail("generation: prefill_chunk must be >= 1");
  if (params_.mode != Mode::kAr) {
    CheckDecodeRanges(params_, ParamNames::kFields);
    if (params_.mask_id < 0 || params_.mask_id >= n_vocab_) {
      Fail("{} mode needs a mask token (tokenizer.ggml.mask_token_id); this model has none",
           ModeName(params_.mode));
    }
    if (!model.hparams().diffusion_shift_logits) {
      Fail(
          "this model declares diffusion.shift_logits = false; crossword implements shifted logits "
          "only");
    }
  }
  if (const int n_layer = model.hparams().n_layer;
      const uint64_t bad = params_.draft_skip_ffn & ~model::SkippableFfnLayers(n_layer)) {
    Fail(
        "--draft-skip-ffn (draft_skip_ffn) names layer {}; this model's draft passes can skip the "
        "FFN blocks of layers 0 .. {} (the last layer's feeds the head)",
        63 - std::countl_zero(bad), n_layer - 2);
  }
  if (params_.mode == Mode::kSpec && state_.max_record_tokens() < params_.block_size) {
    Fail("spec mode needs a state recording {} tokens (StateOptions.max_record_tokens)",
         params_.block_size);
  }
  for (int32_t t : prompt_) {
    if (t < 0 || t >= n_vocab_)
      Fail("generation: prompt token {} outside the vocabulary [0, {})", t, n_vocab_);
  }
  // Every answer token takes one context position (the state must be able to hold the whole
  // exchange for a follow-up turn), the same limit in every mode.
  limit_ =
      std::min<int64_t>(params_.max_tokens, state_.n_ctx() - static_cast<int64_t>(prompt_.size()));
  if (limit_ < 1) {
    Fail("the prompt ({} tokens) leaves no room in a context of {} tokens", prompt_.size(),
         state_.n_ctx());
  }
  history_.AddPrompt(prompt_);
  think_open_ = params_.think_open;
  row_.resize(static_cast<size_t>(n_vocab_));
  // Not under a grammar: constrained rounds are not covered by the fused-pass tests.
  fuse_ = params_.fuse_passes && params_.mode != Mode::kAr && !params_.draft_auto &&
          !params_.draft_expert_budget &&
          (params_.mode != Mode::kSpec || params_.draft_skip_ffn == 0) && !params_.grammar &&
          state_.executor().fuses_passes();
  chunk_verify_ = params_.mode == Mode::kSpec && params_.verify_chunk != 0 && !fuse_ &&
                  state_.executor().computes_more_logits();
  verify_hist_.assign(static_cast<size_t>(params_.block_size), 0);
  input_.reserve(std::max<int64_t>(params_.prefill_chunk, 2 * params_.block_size));
  block_.reserve(params_.block_size);
  masked_.reserve(params_.block_size);
  need_.reserve(2 * params_.block_size);
  stats_.accepted_hist.assign(params_.block_size, 0);
  draft_dist_.resize(params_.mode == Mode::kSpec ? params_.block_size : 0);
  if (params_.grammar) {
    if (params_.eog_ids.empty()) {
      Fail(
          "a grammar needs the end-of-generation tokens to end the answer (ignore_eos cannot be "
          "combined with a grammar)");
    }
    const bool gated = params_.think_open && params_.think_end_id >= 0;
    constraint_ =
        std::make_unique<GrammarConstraint>(params_.grammar, gated ? params_.think_end_id : -1);
  }
  start_ = Clock::now();
}

bool Generation::IsEog(int32_t token) const {
  return std::find(params_.eog_ids.begin(), params_.eog_ids.end(), token) != params_.eog_ids.end();
}

void Generation::CutAtEnd() {
  for (int64_t j = 1; j + 1 < block_len_; ++j) {
    if (!masked_[j] && IsEog(block_[j])) {
      block_len_ = j + 1;
      block_.resize(static_cast<size_t>(block_len_));
      masked_.resize(static_cast<size_t>(block_len_));
      return;
    }
  }
}

void Generation::Finish(FinishReason reason) {
  if (phase_ == Phase::kDone) return;
  phase_ = Phase::kDone;
  wants_more_ = false;
  finish_ = reason;
  if (auto* g = dynamic_cast<GrammarConstraint*>(constraint_.get())) {
    stats_.grammar_masks = g->masks();
    stats_.grammar_seconds = g->mask_seconds();
  }
}

void Generation::Cancel() { Finish(FinishReason::kCancelled); }

std::span<float> Generation::Processed(std::span<const float> row, int64_t t, TokenConstraint* c) {
  std::copy(row.begin(), row.end(), row_.begin());
  std::span<float> p(row_);
  ApplyPenalties(params_.sampling, history_, p);
  if (params_.dllm_biases) {
    if (params_.eos_id >= 0 && params_.eos_id < n_vocab_)
      p[params_.eos_id] += params_.length_bias.At(t);
    if (think_open_ && params_.think_end_id >= 0 && params_.think_end_id < n_vocab_) {
      p[params_.think_end_id] += params_.think_end_bias.At(t);
    }
  }
  if (c) c->Mask(p);
  return p;
}

bool Generation::ReadsInPlace(int64_t t) const {
  const bool biased =
      params_.dllm_biases &&
      (params_.length_bias.At(t) != 0.0f || (think_open_ && params_.think_end_bias.At(t) != 0.0f));
  return !biased && PenaltiesChangeNothing(params_.sampling);
}

std::span<const float> Generation::ProcessedView(std::span<const float> row, int64_t t,
                                                 TokenConstraint* c) {
  if (c || !ReadsInPlace(t)) return Processed(row, t, c);
  return row;
}

int32_t Generation::Choose(std::span<const float> row, int64_t t) {
  return sampler_.Sample(Processed(row, t, constraint_.get()));
}

bool Generation::Emit(int32_t token) {
  if (phase_ == Phase::kDone) return false;
  if (IsEog(token)) {
    Finish(FinishReason::kStop);
    return false;
  }
  // Every emitted token came from a row the constraint masked at this very position.
  if (constraint_ && !constraint_->Accept(token)) {
    Fail("generation: internal error: token {} is not allowed by the grammar here", token);
  }
  if (output_.empty())
    stats_.first_token_seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  output_.push_back(token);
  history_.AddGenerated(token);
  ++stats_.generated;
  if (token == params_.think_end_id) think_open_ = false;
  if (token == params_.think_start_id) think_open_ = true;
  if (sink_ && !sink_(token)) {
    Finish(FinishReason::kCancelled);
    return false;
  }
  if (stats_.generated >= limit_) {
    Finish(FinishReason::kLength);
    return false;
  }
  return true;
}

model::SequenceInput Generation::NextInput() {
  if (phase_ == Phase::kDone) Fail("generation: NextInput after the generation finished");
  if (wants_more_logits()) {
    Fail(
        "generation: NextInput before the verify pass's further logit rows were delivered "
        "(DeliverLogits)");
  }
  model::SequenceInput in;
  in.state = &state_;
  switch (phase_) {
    case Phase::kPrefill: {
      const int64_t from = state_.n_past();
      const int64_t to =
          std::min<int64_t>(from + params_.prefill_chunk, static_cast<int64_t>(prompt_.size()));
      input_.assign(prompt_.begin() + from, prompt_.begin() + to);
      in.logits = to == static_cast<int64_t>(prompt_.size()) ? model::LogitRows::kLast
                                                             : model::LogitRows::kNone;
      break;
    }
    case Phase::kAr:
      input_.assign(1, pending_);
      break;
    case Phase::kDenoise:
    case Phase::kDraft:
      input_ = block_;
      in.kind = model::PassKind::kDenoise;
      in.logits = model::LogitRows::kAll;
      // Row j predicts slot j + 1 (shifted logits): only rows of still-masked slots are read,
      // so the output head skips the others (the last row predicts no slot of this block).
      need_.resize(block_.size());
      for (size_t j = 0; j < block_.size(); ++j)
        need_[j] = j + 1 < block_.size() ? masked_[j + 1] : 0;
      // Fused passes: the last row guesses the token after the block (the next seed).
      if (fuse_) need_.back() = 1;
      in.need_rows = need_;
      if (phase_ == Phase::kDraft && params_.draft_expert_budget) in.expert_anchor_rows = 1;
      if (phase_ == Phase::kDraft && state_.executor().skips_ffn())
        in.skip_ffn_layers = params_.draft_skip_ffn;
      break;
    case Phase::kCommit:
      input_ = block_;
      tail_len_ = fuse_ && guess_ >= 0 ? BlockLen(stats_.generated) : 0;
      if (tail_len_ >= 2) {
        // Fused: [block | guess, MASK...]; of the block's rows only the last (the seed's) is read.
        input_.push_back(guess_);
        input_.resize(block_.size() + static_cast<size_t>(tail_len_), params_.mask_id);
        in.logits = model::LogitRows::kAll;
        need_.assign(input_.size(), 1);
        std::fill(need_.begin(), need_.begin() + static_cast<std::ptrdiff_t>(block_.size()) - 1, 0);
        in.need_rows = need_;
        in.denoise_tail = static_cast<int32_t>(tail_len_);
      } else {
        tail_len_ = 0;
      }
      break;
    case Phase::kVerify:
      input_.assign(block_.begin(), block_.begin() + verify_len_);
      stats_.verify_rows += verify_len_;
      in.logits = model::LogitRows::kAll;
      // A verify pass of the seed alone (no drafts: `--draft-max auto`'s AR rounds, or a round
      // cut to one token) keeps its one token whatever it decides, so it records nothing for a
      // rollback: recording copies every GDN layer's state, ~10 % of an AR step of the embedded
      // model.
      in.record = verify_len_ > 1;
      verify_row_ = 0;
      verify_accepted_ = 0;
      verify_gen0_ = stats_.generated - 1;  // the seed's index among generated tokens
      verify_ready_ = chunk_verify_ ? FirstVerifyChunk(verify_len_) : verify_len_;
      stats_.verify_logit_rows += verify_ready_;
      if (verify_ready_ < verify_len_) {
        need_.assign(static_cast<size_t>(verify_len_), 0);
        std::fill_n(need_.begin(), verify_ready_, 1);
        in.need_rows = need_;
      }
      // Fused: the next round's draft pass [guess, MASK...] as the tail, for the case that every
      // draft is accepted and the bonus is the guess.
      tail_len_ = fuse_ && guess_ >= 0 ? BlockLen(stats_.generated + verify_len_ - 1) : 0;
      if (tail_len_ >= 2) {
        input_.push_back(guess_);
        input_.resize(static_cast<size_t>(verify_len_ + tail_len_), params_.mask_id);
        in.denoise_tail = static_cast<int32_t>(tail_len_);
      } else {
        tail_len_ = 0;
      }
      break;
    case Phase::kDone:
      break;
  }
  in.tokens = input_;
  pass_start_ = round_start_ = Clock::now();
  return in;
}

void Generation::AccountPass(double seconds) {
  const double u = pass_experts_;
  pass_experts_ = 0;
  switch (phase_) {
    case Phase::kPrefill:
      stats_.prefill_experts += u;
      break;
    case Phase::kAr:
      stats_.ar_experts += u;
      break;
    case Phase::kDenoise:
    case Phase::kDraft:
      stats_.denoise_experts += u;
      break;
    case Phase::kCommit:
    case Phase::kVerify:
      stats_.commit_experts += u;
      break;
    default:
      break;
  }
  switch (phase_) {
    case Phase::kPrefill:
      ++stats_.prefill_passes;
      stats_.prefill_seconds += seconds;
      break;
    case Phase::kAr:
      ++stats_.ar_passes;
      stats_.ar_seconds += seconds;
      break;
    case Phase::kDenoise:
    case Phase::kDraft:
      ++stats_.denoise_passes;
      stats_.denoise_seconds += seconds;
      if (phase_ == Phase::kDraft && TimesDrafts())
        timed_rows_ = static_cast<int64_t>(input_.size());
      break;
    case Phase::kCommit:
    case Phase::kVerify:
      ++stats_.commit_passes;
      stats_.commit_seconds += seconds;
      if (tail_len_ > 0) ++stats_.fused_passes;
      if (phase_ == Phase::kVerify && TimesDrafts())
        timed_rows_ = static_cast<int64_t>(input_.size());
      break;
    case Phase::kDone:
      break;
  }
}

void Generation::OnLogits(std::span<const float> logits) {
  AccountPass(std::chrono::duration<double>(Clock::now() - pass_start_).count());
  switch (phase_) {
    case Phase::kPrefill:
      stats_.prompt_tokens += static_cast<int64_t>(input_.size());
      OnPrefill(logits);
      break;
    case Phase::kAr: {
      const int32_t tok = Choose(logits.first(n_vocab_), stats_.generated);
      if (Emit(tok)) pending_ = tok;
      break;
    }
    case Phase::kDenoise:
      OnDenoise(logits);
      break;
    case Phase::kCommit: {
      const int64_t B = static_cast<int64_t>(block_.size()), tail = tail_len_;
      const int32_t guess = guess_;
      const int64_t seed_row = tail > 0 ? B - 1 : 0;  // kLast: one row; fused: kAll
      StartBlock(Choose(logits.subspan(seed_row * n_vocab_, n_vocab_), stats_.generated));
      if (tail > 0) UseTail(logits.subspan(B * n_vocab_), tail, guess);
      break;
    }
    case Phase::kDraft:
      OnDraft(logits);
      break;
    case Phase::kVerify:
      OnVerify(logits);
      break;
    case Phase::kDone:
      break;
  }
  if (!wants_more_) TimeRound();
}

void Generation::TimeRound() {
  if (timed_rows_ == 0) return;
  draft_control_.OnPass(timed_rows_,
                        std::chrono::duration<double>(Clock::now() - round_start_).count());
  timed_rows_ = 0;
}

void Generation::OnPrefill(std::span<const float> logits) {
  if (state_.n_past() < static_cast<int64_t>(prompt_.size())) return;  // more prompt to go
  const int32_t seed = Choose(logits.first(n_vocab_), 0);
  if (params_.mode == Mode::kAr) {
    phase_ = Phase::kAr;
    if (Emit(seed)) pending_ = seed;
  } else {
    StartBlock(seed);
  }
}

int64_t Generation::BlockLen(int64_t generated) const {
  int64_t len = params_.block_size;
  if (params_.mode == Mode::kSpec && params_.draft_max > 0)
    len = std::min<int64_t>(len, params_.draft_max + 1);
  return std::min<int64_t>(len, limit_ - generated);
}

int32_t Generation::Guess(std::span<const float> logits, int64_t row, int64_t t) {
  const int32_t g = Sampler::ArgMax(Processed(logits.subspan(row * n_vocab_, n_vocab_), t, nullptr),
                                    params_.mask_id);
  // An end of generation as the next seed ends the answer: no block would read a tail after it
  // (after a draft cut at a drafted end, the bonus row's guess is mostly that end).
  return IsEog(g) ? -1 : g;
}

void Generation::UseTail(std::span<const float> logits, int64_t tail, int32_t guess) {
  if (phase_ != Phase::kDenoise && phase_ != Phase::kDraft) return;  // ended, or no draft pass
  if (block_.empty() || block_[0] != guess || block_len_ != tail) return;
  ++stats_.fused_hits;
  if (phase_ == Phase::kDenoise) {
    OnDenoise(logits);
  } else {
    OnDraft(logits);
  }
}

void Generation::StartBlock(int32_t seed) {
  phase_ = params_.mode == Mode::kDiffusion ? Phase::kDenoise : Phase::kDraft;
  guess_ = -1;
  int64_t len = BlockLen(stats_.generated);
  // Greedy spec after a round that rejected a draft before a drafted end of generation: draft up
  // to that end only (docs/decoding.md, "Drafts up to the drafted end"). Lossless: the drafts
  // decide no token, and one more round follows if the answer runs past it.
  if (params_.mode == Mode::kSpec && params_.sampling.greedy() && end_ahead_ > stats_.generated)
    len = std::min<int64_t>(len, end_ahead_ - stats_.generated + 1);
  DraftControl::Choice choice;  // counted only if the round runs (a carried controller goes on)
  if (params_.mode == Mode::kSpec && params_.draft_auto) {
    choice = draft_control_.Plan(static_cast<int>(len - 1));
    len = 1 + choice.drafts;
    if (len == 1) {  // no draft pays: the round is one AR step (a verify pass of the seed)
      phase_ = Phase::kVerify;
      verify_len_ = 1;
    }
  }
  block_len_ = len;
  block_.assign(1, seed);
  block_.resize(block_len_, params_.mask_id);
  masked_.assign(block_.size(), 1);
  masked_[0] = 0;
  if (!Emit(seed)) return;  // EOG seed, length, or cancelled: no pass runs, so no round
  draft_control_.Take(choice);
  ++stats_.rounds;
  block_emitted_ = 1;
}

Generation::Best Generation::GreedyCandidates(std::span<const float> logits, int64_t j0,
                                              int64_t step, int64_t j1,
                                              std::span<std::pair<int32_t, float>> cand) const {
  Best best;
  for (int64_t j = j0; j < j1; j += step) {
    if (!masked_[j]) continue;
    const std::span<const float> p = logits.subspan((j - 1) * n_vocab_, n_vocab_);
    const int32_t tok = Sampler::ArgMax(p, params_.mask_id);
    RequireAllowed(p, tok);
    // A NaN row (a failed model) has no probability: 0 (see OnDenoise).
    float conf =
        SoftmaxProbAboveOfArgMax(p, tok, params_.mask_id, std::min(params_.threshold, best.conf));
    if (!(conf >= 0.0f)) conf = 0.0f;
    cand[static_cast<size_t>(j)] = {tok, conf};
    if (conf > best.conf) best = {j, conf};
  }
  return best;
}

void Generation::OnDenoise(std::span<const float> logits) {
  if (constraint_) {
    OnDenoiseConstrained(logits);
    return;
  }
  const int64_t B = block_len_;
  const int64_t gen0 = stats_.generated - block_emitted_;  // generated before this block
  int64_t best_slot = -1;
  float best_conf = -1.0f;
  int64_t n_committed = 0;
  // Candidates are computed for every masked slot before any is committed.
  std::array<std::pair<int32_t, float>, 256> cand{};
  bool in_place = params_.sampling.greedy();
  int64_t n_masked = 0;
  for (int64_t j = 1; j < B && in_place; ++j) {
    if (!masked_[j]) continue;
    in_place = ReadsInPlace(gen0 + j);
    ++n_masked;
  }
  if (in_place) {
    // The rows are independent: interleaved slots on the host pool's threads (run r takes every
    // runs-th slot from 1 + r: the confident rows, which need their whole sum, cluster near the
    // seed), each run with its own best (GreedyCandidates). The largest confidence over the
    // runs, on equal ones the lowest slot, is the best of one scan over all slots. Work: an
    // exponential per logit (~16 multiply-adds in the pool's units) over the masked rows.
    constexpr int kMaxRuns = 16;
    std::array<Best, kMaxRuns> best{};
    const int runs = host_pool_ ? std::min(host_pool_->size(), kMaxRuns) : 1;
    auto run = [&](int64_t r, int) {
      best[static_cast<size_t>(r)] = GreedyCandidates(logits, 1 + r, runs, B, cand);
    };
    if (runs > 1) {
      host_pool_->ParallelFor(runs, n_masked * n_vocab_ * 16, run);
    } else {
      run(0, 0);
    }
    for (const Best& b : std::span(best).first(static_cast<size_t>(runs))) {
      if (b.conf > best_conf || (b.conf == best_conf && b.slot >= 0 && b.slot < best_slot)) {
        best_conf = b.conf;
        best_slot = b.slot;
      }
    }
  }
  for (int64_t j = 1; j < B && !in_place; ++j) {
    if (!masked_[j]) continue;
    const std::span<const float> row = logits.subspan((j - 1) * n_vocab_, n_vocab_);
    std::span<const float> p;
    int32_t tok;
    if (params_.sampling.greedy()) {
      p = ProcessedView(row, gen0 + j, nullptr);
      tok = Sampler::ArgMax(p, params_.mask_id);
      RequireAllowed(p, tok);
    } else {
      const std::span<float> w = Processed(row, gen0 + j, nullptr);
      const float saved = w[params_.mask_id];
      w[params_.mask_id] = -std::numeric_limits<float>::infinity();
      tok = sampler_.Sample(w);
      w[params_.mask_id] = saved;
      p = w;
    }
    // A NaN row (a failed model) has no probability: count it as 0, so the pass still commits its
    // most confident slot and the block ends. (A row with every token banned failed above.)
    // The exact confidence matters only if it reaches the threshold or beats the best so far, so
    // below both the sum may stop early (the value then stays below both: no commit, no best).
    // A greedy token is the row's argmax, so its maximum is known (as in GreedyCandidates).
    const float below = std::min(params_.threshold, best_conf);
    float conf = params_.sampling.greedy()
                     ? SoftmaxProbAboveOfArgMax(p, tok, params_.mask_id, below)
                     : SoftmaxProbAbove(p, tok, below);
    if (!(conf >= 0.0f)) conf = 0.0f;
    cand[j] = {tok, conf};
    if (conf > best_conf) {
      best_conf = conf;
      best_slot = j;
    }
  }
  for (int64_t j = 1; j < B; ++j) {
    if (masked_[j] && cand[j].second >= params_.threshold) {
      block_[j] = cand[j].first;
      masked_[j] = 0;
      ++n_committed;
    }
  }
  if (n_committed == 0 && best_slot > 0) {
    block_[best_slot] = cand[best_slot].first;
    masked_[best_slot] = 0;
  }
  CutAtEnd();
  // Stream the leading run of committed slots; an EOG there ends the answer (no mask before it).
  while (block_emitted_ < block_len_ && !masked_[block_emitted_]) {
    if (!Emit(block_[block_emitted_])) return;
    ++block_emitted_;
  }
  if (block_emitted_ == block_len_) {  // (a cut block ends at its EOG above: never here)
    phase_ = Phase::kCommit;
    if (fuse_) guess_ = Guess(logits, block_len_ - 1, stats_.generated);
  }
}

// Constrained LowConfidence (docs/decoding.md): a slot commits only when every slot before it
// is committed and the grammar accepts it, so the leading masked slots commit in order: each
// one's candidate comes from its row masked at the grammar state after the slots before it, and
// the run stops at the first candidate whose confidence (its probability under the masked row)
// is below the threshold; the first masked slot of a pass always commits. Committed slots are
// emitted at once, which advances the grammar.
void Generation::OnDenoiseConstrained(std::span<const float> logits) {
  const int64_t B = block_len_;
  const int64_t gen0 = stats_.generated - block_emitted_;  // generated before this block
  const int64_t first = block_emitted_;                    // every slot before it is emitted
  for (int64_t j = first; j < B; ++j) {
    std::span<float> p =
        Processed(logits.subspan((j - 1) * n_vocab_, n_vocab_), gen0 + j, constraint_.get());
    p[params_.mask_id] = -std::numeric_limits<float>::infinity();
    const int32_t tok =
        params_.sampling.greedy() ? Sampler::ArgMax(p, params_.mask_id) : sampler_.Sample(p);
    RequireAllowed(p, tok);
    if (j > first && SoftmaxProbAbove(p, tok, params_.threshold) < params_.threshold) break;
    block_[j] = tok;
    masked_[j] = 0;
    if (!Emit(tok)) return;
    ++block_emitted_;
  }
  if (block_emitted_ == B) {
    phase_ = Phase::kCommit;
    if (fuse_) guess_ = Guess(logits, B - 1, stats_.generated);
  }
}

void DeliverLogits(Generation& gen, model::ForwardContext& ctx, int s) {
  gen.OnLogits(ctx.logits(s));
  while (gen.wants_more_logits()) {
    const auto [begin, end] = gen.more_logit_rows();
    ctx.executor().MoreLogits(ctx, s, begin, end);
    gen.OnMoreLogits(ctx.logits(s));
  }
}

}  // namespace crossword::decode
