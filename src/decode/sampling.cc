// Sampling implementation. Top-k/top-p/min-p follow the llama.cpp / vLLM definitions.
#include "decode/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "kernels/kernels.h"

namespace crossword::decode {

SamplingParams ModelDefaults(std::string_view arch) {
  SamplingParams p;
  if (arch == "clover_moe") {
    p.presence_penalty = 0.9f;
    p.repetition_penalty = 1.05f;
  }
  return p;
}

void TokenHistory::AddPrompt(std::span<const int32_t> tokens) {
  for (int32_t t : tokens) ++all_[t];
}

void TokenHistory::AddGenerated(int32_t token) {
  ++generated_[token];
  ++all_[token];
  ++n_generated_;
}

void TokenHistory::RemoveGenerated(int32_t token) {
  auto dec = [token](std::unordered_map<int32_t, int32_t>& m) {
    auto it = m.find(token);
    if (it == m.end()) return;
    if (--it->second == 0) m.erase(it);
  };
  dec(generated_);
  dec(all_);
  --n_generated_;
}

bool PenaltiesChangeNothing(const SamplingParams& params) {
  return params.repetition_penalty == 1.0f && params.presence_penalty == 0.0f &&
         params.frequency_penalty == 0.0f && params.logit_bias.empty();
}

void ApplyPenalties(const SamplingParams& params, const TokenHistory& history,
                    std::span<float> logits) {
  const int64_t n = static_cast<int64_t>(logits.size());
  if (params.repetition_penalty != 1.0f) {
    for (const auto& [tok, count] : history.all_counts()) {
      if (tok < 0 || tok >= n || count == 0) continue;
      float& l = logits[tok];
      l = l > 0.0f ? l / params.repetition_penalty : l * params.repetition_penalty;
    }
  }
  if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
    for (const auto& [tok, count] : history.generated_counts()) {
      if (tok < 0 || tok >= n || count == 0) continue;
      logits[tok] -= params.presence_penalty + params.frequency_penalty * static_cast<float>(count);
    }
  }
  for (const auto& [tok, bias] : params.logit_bias) {
    if (tok >= 0 && tok < n) logits[tok] += bias;
  }
}

Sampler::Sampler(SamplingParams params, int64_t n_vocab)
    : params_(std::move(params)), n_vocab_(n_vocab), rng_(params_.seed) {
  if (params_.temperature < 0.0f || !std::isfinite(params_.temperature))
    Fail("temperature must be >= 0");
  if (params_.top_p <= 0.0f || params_.top_p > 1.0f) Fail("top_p must be in (0, 1]");
  if (params_.min_p < 0.0f || params_.min_p > 1.0f) Fail("min_p must be in [0, 1]");
  if (params_.top_k < 0) Fail("top_k must be >= 0");
  if (params_.repetition_penalty <= 0.0f) Fail("repetition penalty must be > 0");
  cand_.reserve(static_cast<size_t>(n_vocab));
}

int32_t Sampler::ArgMax(std::span<const float> logits, int32_t exclude) {
  return static_cast<int32_t>(
      kernels::ArgMax(logits.data(), static_cast<int64_t>(logits.size()), exclude));
}

float SoftmaxProb(std::span<const float> logits, int32_t token) {
  return kernels::SoftmaxProb(logits.data(), static_cast<int64_t>(logits.size()), token);
}

float SoftmaxProbAbove(std::span<const float> logits, int32_t token, float below) {
  return kernels::SoftmaxProbAbove(logits.data(), static_cast<int64_t>(logits.size()), token,
                                   below);
}

float SoftmaxProbAboveOfArgMax(std::span<const float> logits, int32_t token, int32_t exclude,
                               float below) {
  // The largest kept value and the excluded one: the row's maximum when the row holds no NaN.
  // (A row with a NaN sums to NaN under any maximum, or stops early below `below` before it,
  // as with the kernel's own maximum: either way no commit, and 0 or a bound under the best.)
  float max = logits[static_cast<size_t>(token)];
  if (exclude >= 0 && static_cast<size_t>(exclude) < logits.size()) {
    max = std::max(max, logits[static_cast<size_t>(exclude)]);
  }
  return kernels::SoftmaxProbAbove(logits.data(), static_cast<int64_t>(logits.size()), token, below,
                                   max);
}

std::span<const std::pair<int32_t, float>> Sampler::Probabilities(std::span<const float> logits) {
  cand_.clear();
  if (params_.greedy()) {
    const int32_t top = ArgMax(logits);
    if (logits[static_cast<size_t>(top)] != -std::numeric_limits<float>::infinity())
      cand_.emplace_back(top, 1.0f);
    return cand_;
  }
  const float inv_t = 1.0f / params_.temperature;
  float mx = -std::numeric_limits<float>::infinity();
  for (float l : logits) mx = std::max(mx, l);
  // Every token excluded: (l - mx) would be NaN for all of them.
  if (mx == -std::numeric_limits<float>::infinity()) return cand_;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = (logits[i] - mx) * inv_t;
    if (v > -80.0f) cand_.emplace_back(static_cast<int32_t>(i), v);  // exp(-80) ~ 1e-35: drop
  }
  std::sort(cand_.begin(), cand_.end(), [](const auto& a, const auto& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  });
  if (params_.top_k > 0 && cand_.size() > static_cast<size_t>(params_.top_k))
    cand_.resize(params_.top_k);
  double sum = 0.0;
  for (auto& c : cand_) sum += (c.second = std::exp(c.second));
  for (auto& c : cand_) c.second = static_cast<float>(c.second / sum);
  if (params_.min_p > 0.0f) {
    const float floor = params_.min_p * cand_.front().second;
    size_t keep = 1;
    while (keep < cand_.size() && cand_[keep].second >= floor) ++keep;
    cand_.resize(keep);
  }
  if (params_.top_p < 1.0f) {
    double acc = 0.0;
    size_t keep = 0;
    while (keep < cand_.size()) {
      acc += cand_[keep].second;
      ++keep;
      if (acc >= params_.top_p) break;
    }
    cand_.resize(keep);
  }
  sum = 0.0;
  for (const auto& c : cand_) sum += c.second;
  for (auto& c : cand_) c.second = static_cast<float>(c.second / sum);
  return cand_;
}

float Sampler::Uniform() { return std::uniform_real_distribution<float>(0.0f, 1.0f)(rng_); }

int32_t Draw(std::span<const std::pair<int32_t, float>> dist, double u) {
  Check(!dist.empty(), "Draw: empty distribution");
  double acc = 0.0;
  for (const auto& [tok, w] : dist) {
    acc += w;
    if (u < acc) return tok;
  }
  return dist.back().first;
}

void FailNoTokenAllowed() {
  throw RequestError(
      "no token is allowed at this point of the answer: the request's logit_bias and its "
      "grammar / response format (and, in diffusion mode, the mask token, which it never emits) "
      "together exclude every token");
}

void RequireAllowed(std::span<const float> logits, int32_t token) {
  if (logits[static_cast<size_t>(token)] == -std::numeric_limits<float>::infinity())
    FailNoTokenAllowed();
}

int32_t Sampler::Sample(std::span<const float> logits) {
  if (params_.greedy()) {
    const int32_t top = ArgMax(logits);
    RequireAllowed(logits, top);
    return top;
  }
  const auto dist = Probabilities(logits);
  if (dist.empty()) FailNoTokenAllowed();
  return Draw(dist, Uniform());
}

}  // namespace crossword::decode
