// GrammarConstraint: a grammar::Matcher behind the TokenConstraint interface, with the
// reasoning gate.
#include "decode/constraint.h"

#include <chrono>
#include <limits>

#include "base/error.h"

namespace crossword::decode {

GrammarConstraint::GrammarConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar,
                                     int32_t gate_token)
    : matcher_(std::move(grammar)), gate_(gate_token), bits_(matcher_.mask_words()) {}

void GrammarConstraint::Mask(std::span<float> logits) {
  const grammar::TokenVocabulary& v = matcher_.grammar().vocab();
  const auto n =
      static_cast<int32_t>(std::min<size_t>(logits.size(), static_cast<size_t>(v.size())));
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  if (!active()) {
    for (int32_t id : v.eos()) {
      if (id < n) logits[id] = kOff;
    }
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  matcher_.FillMask(bits_);
  ++masks_;
  mask_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int32_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = bits_[w];
    if (bits == ~uint64_t{0}) continue;
    const int32_t end = std::min(n, w * 64 + 64);
    for (int32_t id = w * 64; id < end; ++id) {
      if (!((bits >> (id & 63)) & 1)) logits[id] = kOff;
    }
  }
  // Ids past the grammar's vocabulary (padding rows of the output head) are never allowed.
  for (size_t id = static_cast<size_t>(n); id < logits.size(); ++id) logits[id] = kOff;
}

bool GrammarConstraint::Allowed(int32_t token) {
  if (!active()) return !matcher_.grammar().vocab().IsEos(token);
  return matcher_.IsAllowed(token);
}

bool GrammarConstraint::Accept(int32_t token) {
  if (!active()) {
    if (matcher_.grammar().vocab().IsEos(token)) return false;
    const bool gate = token == gate_;
    if (gate) gate_seen_ = true;
    fed_.push_back(gate ? 2 : 0);
    return true;
  }
  if (!matcher_.Accept(token)) return false;
  fed_.push_back(1);
  return true;
}

void GrammarConstraint::Rollback(size_t n) {
  Check(n <= fed_.size(), "grammar constraint: cannot roll back {} tokens ({} accepted)", n,
        fed_.size());
  for (size_t i = 0; i < n; ++i) {
    const uint8_t f = fed_.back();
    fed_.pop_back();
    if (f == 1) matcher_.Rollback(1);
    if (f == 2) gate_seen_ = false;
  }
}

}  // namespace crossword::decode
