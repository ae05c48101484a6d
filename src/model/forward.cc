// The backend-neutral half of the forward contract: state bookkeeping (committed length, snapshot
// validity, recorded passes) and the batch checks every executor makes before a pass.
#include "model/forward.h"

#include <algorithm>

#include "base/error.h"
#include "model/model.h"

namespace crossword::model {

const Hparams& Executor::hparams() const { return model().hparams(); }

void Executor::MoreLogits(ForwardContext& /*ctx*/, int /*s*/, int64_t /*begin*/,
                          int64_t /*end*/) const {
  Fail("the {} executor computes no logit rows after a pass (MoreLogits)", name());
}

SequenceState::SequenceState(const Executor& executor, const StateOptions& options)
    : executor_(&executor),
      n_ctx_(options.n_ctx),
      kv_type_(options.kv_type),
      max_rec_(options.max_record_tokens) {
  if (n_ctx_ < 1) Fail("state: n_ctx must be >= 1 (got {})", n_ctx_);
  if (kv_type_ != GgmlType::kF16 && kv_type_ != GgmlType::kF32) {
    Fail("state: KV cache type must be F16 or F32 (got {})", TypeName(kv_type_));
  }
  if (max_rec_ < 0) Fail("state: max_record_tokens must be >= 0");
}

void SequenceState::Reset() {
  n_past_ = 0;
  high_water_ = 0;
  ++generation_;
  rewrite_pos_[generation_ % kRewriteLog] = 0;
  rec_T_ = 0;
  ResetRecurrent();
}

void SequenceState::SaveSnapshot(StateSnapshot& snapshot) const {
  SaveRecurrent(snapshot.payload);
  snapshot.n_past = n_past_;
  snapshot.generation = generation_;
}

bool SequenceState::CanRestore(const StateSnapshot& s) const {
  if (!s.valid() || s.n_past > n_ctx_ || !RecurrentFits(*s.payload)) return false;
  if (s.generation > generation_) return false;
  if (generation_ - s.generation >= kRewriteLog) return false;  // history no longer known
  for (uint64_t g = s.generation + 1; g <= generation_; ++g) {
    if (rewrite_pos_[g % kRewriteLog] < s.n_past) return false;
  }
  return true;
}

void SequenceState::Restore(const StateSnapshot& s) {
  if (!CanRestore(s)) {
    Fail(
        "state: cannot restore a snapshot at {} tokens: the sequence was rewritten before that "
        "point since the snapshot was taken (or the snapshot belongs to another model or "
        "executor)",
        s.n_past);
  }
  RestoreRecurrent(*s.payload);
  n_past_ = s.n_past;
  rec_T_ = 0;
}

void SequenceState::RollbackTo(int64_t n_keep) {
  if (rec_T_ == 0) Fail("state: RollbackTo needs a recorded pass (forward with record = true)");
  if (n_keep < 0 || n_keep > rec_T_)
    Fail("state: RollbackTo({}) outside the recorded pass of {} tokens", n_keep, rec_T_);
  if (n_keep == rec_T_) return;
  ReplayRecurrent(n_keep);
  n_past_ = rec_start_ + n_keep;
  rec_T_ = 0;
}

void SequenceState::NoteKvWrite(int64_t pos, int64_t T) {
  if (pos < high_water_) {
    ++generation_;
    rewrite_pos_[generation_ % kRewriteLog] = pos;
  }
  high_water_ = std::max(high_water_, pos + T);
}

void SequenceState::Advance(int64_t T, bool recorded) {
  rec_start_ = n_past_;
  rec_T_ = recorded ? T : 0;
  n_past_ += T;
}

BatchTotals ValidateBatch(const Executor& executor, std::span<const SequenceInput> seqs,
                          const ForwardContext& ctx) {
  const ContextOptions& opt = ctx.options();
  const int64_t n_vocab = executor.hparams().n_vocab;
  if (&ctx.executor() != &executor) Fail("forward: the context belongs to another executor");
  if (seqs.empty()) Fail("forward: empty batch");
  if (static_cast<int64_t>(seqs.size()) > opt.max_seqs) {
    Fail("forward: {} sequences in one pass, the context holds {}", seqs.size(), opt.max_seqs);
  }
  BatchTotals totals;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SequenceInput& in = seqs[s];
    if (!in.state) Fail("forward: sequence {} has no state", s);
    if (&in.state->executor() != &executor)
      Fail("forward: the state of sequence {} belongs to another executor", s);
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
      if (tok < 0 || tok >= n_vocab)
        Fail("forward: token id {} is outside the vocabulary [0, {})", tok, n_vocab);
    }
    if (!in.need_rows.empty() &&
        (in.logits != LogitRows::kAll || static_cast<int64_t>(in.need_rows.size()) != T)) {
      Fail("forward: sequence {} has need_rows, which needs LogitRows::kAll and one flag per token",
           s);
    }
    if (in.expert_anchor_rows < 0 || (in.expert_anchor_rows > 0 && in.kind != PassKind::kDenoise)) {
      Fail(
          "forward: sequence {} has expert_anchor_rows {}; it must be >= 0, and > 0 only in a "
          "denoise pass",
          s, in.expert_anchor_rows);
    }
    if (in.denoise_tail < 0 ||
        (in.denoise_tail > 0 &&
         (in.kind != PassKind::kCausal || in.denoise_tail >= T || !executor.fuses_passes()))) {
      Fail(
          "forward: sequence {} has denoise_tail {} of {} tokens; it must be >= 0, and > 0 only in "
          "a causal pass that keeps at least one causal token, on an executor that fuses passes",
          s, in.denoise_tail, T);
    }
    if (in.skip_ffn_layers != 0) {
      const int n_layer = executor.hparams().n_layer;
      if (in.kind != PassKind::kDenoise || !executor.skips_ffn() ||
          (in.skip_ffn_layers & ~SkippableFfnLayers(n_layer)) != 0) {
        Fail(
            "forward: sequence {} skips FFN blocks (mask {:#x}); only a denoise pass may, on an "
            "executor that skips them, and only layers 0 .. {} (the last layer's FFN feeds the "
            "head)",
            s, in.skip_ffn_layers, n_layer - 2);
      }
    }
    const int64_t committed = T - in.denoise_tail;
    if (in.record && (in.kind != PassKind::kCausal || committed > in.state->max_record_tokens())) {
      Fail(
          "forward: sequence {} asks to record {} tokens; recording needs a causal pass of at most "
          "StateOptions.max_record_tokens ({}) tokens",
          s, committed, in.state->max_record_tokens());
    }
    totals.tokens += T;
    totals.logit_rows += LogitRowCount(in.logits, T);
  }
  if (totals.tokens > opt.max_tokens)
    Fail("forward: {} tokens in one pass, the context holds {}", totals.tokens, opt.max_tokens);
  if (totals.logit_rows > opt.max_logit_rows) {
    Fail("forward: {} logit rows requested, the context holds {}", totals.logit_rows,
         opt.max_logit_rows);
  }
  return totals;
}

}  // namespace crossword::model
