// Prometheus metrics of `crossword serve` (GET /metrics): latency histograms fed by scheduler and
// request events, and the text exposition (format 0.0.4) of every metric under crossword's names,
// plus vLLM's names with `--metrics-compat vllm` so tools written for vLLM (the llm-d router's
// default mapping, its dashboards) read crossword unchanged. docs/deploy.md says what each means;
// the meanings follow the Gateway API Inference Extension's model server protocol.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/scheduler.h"

namespace crossword::server {

enum class MetricsCompat : uint8_t { kNone, kVllm };
/// "none" or "vllm"; throws crossword::Error naming --metrics-compat otherwise.
MetricsCompat ParseMetricsCompat(std::string_view name);

/// A Prometheus histogram with fixed upper bounds: bucket i counts observations <= bounds[i],
/// the implicit +Inf bucket all of them. Observe and Read from any thread; a read is consistent
/// (count = the +Inf bucket, buckets non-decreasing) because both hold one short lock.
class Histogram {
 public:
  /// `bounds` strictly increasing and finite.
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  struct Snapshot {
    std::vector<uint64_t> cumulative;  ///< one per bound, counts of observations <= bound
    uint64_t count = 0;
    double sum = 0;
  };
  Snapshot Read() const;
  const std::vector<double>& bounds() const { return bounds_; }
  /// The bounds as `le` label values, formatted once (a scrape formats no bound).
  const std::vector<std::string>& bound_labels() const { return bound_labels_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::string> bound_labels_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); the last one is the overflow
  uint64_t count_ = 0;
  double sum_ = 0;
};

/// Request-level metrics the scheduler's counters do not hold. Units: seconds.
struct RequestMetrics {
  RequestMetrics();
  /// One forward pass emitted `tokens` of one request (engine::SchedulerOptions::on_emit, the
  /// scheduler thread): every emission after a request's first is one inter-token latency
  /// observation (per pass, as vLLM counts it: a diffusion block of 8 tokens is one observation).
  void OnEmit(int64_t tokens, bool first, double seconds);
  /// A generation request ended (finished, cancelled or failed), once per client request:
  /// `first_token_seconds` since it was queued (< 0: it emitted nothing).
  void OnRequestDone(const engine::RequestOutcome& outcome, double first_token_seconds);

  Histogram ttft;             ///< queued -> first token
  Histogram itl;              ///< between two emitting passes of one request
  Histogram tpot;             ///< per request: (end - first token) / (tokens - 1)
  Histogram e2e;              ///< queued -> end
  Histogram queue;            ///< queued -> slot
  Histogram tokens_per_pass;  ///< per request with a pass after prefill: tokens / those passes
  std::atomic<int64_t> finished_stop{0}, finished_length{0};  ///< ended by EOG/stop, by length
};

/// Everything one scrape shows besides the RequestMetrics histograms.
struct MetricsView {
  bool ready = false;     ///< the model is loaded
  bool draining = false;  ///< SIGTERM: finishing what runs, taking nothing new
  int64_t http_requests = 0, http_4xx = 0, http_5xx = 0;
  engine::SchedulerMetrics sched;  ///< zeros before the model is loaded
  int n_slots = 0;
  int64_t cache_block_tokens = 0;  ///< prompt-cache granularity reported as the block size
  std::string model_name;          ///< the model_name label of the vLLM names
};

/// The exposition text of one scrape (text/plain; version=0.0.4).
std::string RenderMetrics(const MetricsView& view, const RequestMetrics& requests,
                          MetricsCompat compat);

}  // namespace crossword::server
