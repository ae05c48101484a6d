// Token constraints (structured output): what Generation asks at each position of a slot's
// prefix. The grammar constraint wraps a grammar::Matcher (docs/structured-output.md).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "grammar/matcher.h"

namespace crossword::decode {

/// Limits the tokens a generation may emit. The constraint stands at the position after the
/// tokens it accepted; Generation advances it by each emitted token and, along a speculative
/// draft, tentatively (undone with Rollback).
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  /// Sets every logit of a token not allowed next to -infinity (`logits`: n_vocab entries).
  virtual void Mask(std::span<float> logits) = 0;
  /// Whether `token` may come next.
  virtual bool Allowed(int32_t token) = 0;
  /// Advances by `token`; false (and no change) when it is not allowed.
  virtual bool Accept(int32_t token) = 0;
  /// Undoes the last `n` Accepts.
  virtual void Rollback(size_t n) = 0;
  /// Nothing more may follow (the grammar ended with an end-of-generation token).
  virtual bool Terminated() const = 0;
};

/// A grammar as a TokenConstraint. With `gate_token` >= 0 the grammar starts only after that
/// token (the `</think>` that closes the reasoning, which stays free text); before it, anything
/// but an end-of-generation token is allowed, so the answer cannot end inside the reasoning.
/// The mask is built in a buffer allocated at construction (vocabulary / 64 words).
class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar, int32_t gate_token);

  void Mask(std::span<float> logits) override;
  bool Allowed(int32_t token) override;
  bool Accept(int32_t token) override;
  void Rollback(size_t n) override;
  bool Terminated() const override { return active() && matcher_.Terminated(); }

  bool active() const { return gate_ < 0 || gate_seen_; }
  const grammar::Matcher& matcher() const { return matcher_; }
  /// Mask computations and their total time (seconds), for DecodeStats.
  int64_t masks() const { return masks_; }
  double mask_seconds() const { return mask_seconds_; }

 private:
  grammar::Matcher matcher_;
  int32_t gate_;
  bool gate_seen_ = false;
  std::vector<uint8_t> fed_;  // per accepted token: 1 fed to the matcher, 2 the gate token
  std::vector<uint64_t> bits_;
  int64_t masks_ = 0;
  double mask_seconds_ = 0;
};

}  // namespace crossword::decode
