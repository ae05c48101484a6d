// Token sampling: logit processing (penalties, biases, temperature, top-k, top-p, min-p) and
// the draw itself, deterministic per seed.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace crossword::decode {

/// Sampling settings. The defaults give greedy decoding with no penalties; ModelDefaults()
/// applies a model's generation config (Clover: presence 0.9, repetition 1.05).
struct SamplingParams {
  float temperature = 0.0f;  ///< 0 = greedy (argmax)
  int top_k = 0;             ///< 0 = off
  float top_p = 1.0f;        ///< 1 = off
  float min_p = 0.0f;        ///< 0 = off (keep tokens with p >= min_p * p_max)
  uint64_t seed = 0;
  /// vLLM semantics: repetition penalty over prompt and generated tokens (logit > 0: divided,
  /// else multiplied); presence and frequency penalties over generated tokens only
  /// (logit -= presence * [count > 0] + frequency * count).
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  /// Extra additive logit biases (token id, bias), e.g. OpenAI logit_bias.
  std::vector<std::pair<int32_t, float>> logit_bias;

  bool greedy() const { return temperature <= 0.0f; }
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
};

/// Generation defaults published for an architecture (clover_moe: Clover's generation_config:
/// greedy, presence_penalty 0.9, repetition_penalty 1.05); plain defaults otherwise.
SamplingParams ModelDefaults(std::string_view arch);

/// The history a sampler penalizes: counts of prompt and generated tokens. Cheap to copy
/// (speculative verification extends a copy with draft tokens).
class TokenHistory {
 public:
  void AddPrompt(std::span<const int32_t> tokens);
  void AddGenerated(int32_t token);
  /// Undo the last AddGenerated(token) (speculative rollback).
  void RemoveGenerated(int32_t token);
  int64_t n_generated() const { return n_generated_; }
  const std::unordered_map<int32_t, int32_t>& generated_counts() const { return generated_; }
  const std::unordered_map<int32_t, int32_t>& all_counts() const { return all_; }

 private:
  std::unordered_map<int32_t, int32_t> generated_;
  std::unordered_map<int32_t, int32_t> all_;
  int64_t n_generated_ = 0;
};

/// True when ApplyPenalties leaves every logit as it is (no penalty, no logit bias).
bool PenaltiesChangeNothing(const SamplingParams& params);
/// Applies penalties and logit biases to `logits` in place (n_vocab entries).
void ApplyPenalties(const SamplingParams& params, const TokenHistory& history,
                    std::span<float> logits);

/// Greedy or random choice from processed logits, deterministic for a given seed and sequence of
/// calls. Not thread-safe (one per generation).
class Sampler {
 public:
  Sampler(SamplingParams params, int64_t n_vocab);
  const SamplingParams& params() const { return params_; }

  /// Index of the largest logit (ties: lowest index), skipping `exclude` if >= 0.
  static int32_t ArgMax(std::span<const float> logits, int32_t exclude = -1);

  /// Chooses a token from already-penalized logits: argmax when greedy, else a draw from the
  /// distribution after temperature, top-k, top-p and min-p (Probabilities()). Throws
  /// RequestError when no logit is finite (the request's biases and grammar exclude every token).
  int32_t Sample(std::span<const float> logits);

  /// The distribution Sample draws from, as (token, probability) pairs with probability > 0,
  /// sorted by descending probability. Greedy gives the single argmax with probability 1. Empty
  /// when no logit is finite (every token excluded). Used by speculative sampling. Reuses an
  /// internal buffer; the span lives until the next call.
  std::span<const std::pair<int32_t, float>> Probabilities(std::span<const float> logits);

  /// Uniform draw in [0, 1) from the sampler's generator (speculative acceptance tests).
  float Uniform();

 private:
  SamplingParams params_;
  int64_t n_vocab_;
  std::mt19937_64 rng_;
  std::vector<std::pair<int32_t, float>> cand_;
};

/// Throws RequestError unless `logits[token]` is finite or NaN: a choice among logits that are
/// all -inf means the request's logit_bias, grammar and the mode's own exclusions (the mask
/// token) left no token at this position. (ArgMax answers such a row with some index.)
void RequireAllowed(std::span<const float> logits, int32_t token);

/// Throws the RequestError of RequireAllowed (no token is allowed at this position).
[[noreturn]] void FailNoTokenAllowed();

/// Softmax probability of `token` in `logits` (full vocabulary, max-subtracted;
/// kernels::SoftmaxProb: exp in float, the sum in double; 1.6 us per 4,096-wide row, 18 us with a
/// double exp each).
float SoftmaxProb(std::span<const float> logits, int32_t token);
/// SoftmaxProb when it is >= `below`, else some value in [SoftmaxProb, below)
/// (kernels::SoftmaxProbAbove: the sum stops early on rows that cannot reach `below`).
float SoftmaxProbAbove(std::span<const float> logits, int32_t token, float below);
/// The same for `token` = Sampler::ArgMax(logits, exclude): the row's maximum is then logits[token]
/// or logits[exclude], so the kernel skips its own pass for it (kernels::SoftmaxProbAbove).
float SoftmaxProbAboveOfArgMax(std::span<const float> logits, int32_t token, int32_t exclude,
                               float below);

/// The categorical draw every sampled choice uses: the token of the first entry of `dist` whose
/// cumulative weight exceeds `u`, for `u` uniform in [0, total weight) (weights need not sum to
/// 1); the last entry when rounding leaves `u` past the total. Throws Error on an empty `dist`.
int32_t Draw(std::span<const std::pair<int32_t, float>> dist, double u);

}  // namespace crossword::decode
