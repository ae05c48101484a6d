// Metrics registry and Prometheus text exposition for `crossword serve` (see metrics.h).
#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "base/error.h"

namespace crossword::server {

MetricsCompat ParseMetricsCompat(std::string_view name) {
  if (name == "none") return MetricsCompat::kNone;
  if (name == "vllm") return MetricsCompat::kVllm;
  Fail("--metrics-compat must be none or vllm (got '{}')", name);
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  for (double b : bounds_) bound_labels_.push_back(fmt::format("{}", b));
}

void Histogram::Observe(double value) {
  if (!std::isfinite(value)) return;
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) -
                                       bounds_.begin());
  std::lock_guard lk(mu_);
  ++counts_[i];
  ++count_;
  sum_ += value;
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  s.cumulative.resize(bounds_.size());
  std::lock_guard lk(mu_);
  uint64_t run = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) s.cumulative[i] = run += counts_[i];
  s.count = count_;
  s.sum = sum_;
  return s;
}

namespace {

// Bucket bounds: vLLM's (public) for the same histograms, extended downwards where a CPU engine's
// small models are faster than any GPU bucket (inter-token times under 10 ms).
std::vector<double> TtftBounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> TokenTimeBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,
          0.4,   0.5,    0.75,  1.0,  2.5,   5.0,  7.5,   10.0, 20.0, 40.0, 80.0};
}
std::vector<double> RequestTimeBounds() {
  return {0.01, 0.025, 0.05, 0.1,  0.3,  0.5,  0.8,   1.0,   1.5,   2.0,   2.5,    5.0,   10.0,
          15.0, 20.0,  30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}
std::vector<double> TokensPerPassBounds() { return {1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64}; }

}  // namespace

RequestMetrics::RequestMetrics()
    : ttft(TtftBounds()),
      itl(TokenTimeBounds()),
      tpot(TokenTimeBounds()),
      e2e(RequestTimeBounds()),
      queue(RequestTimeBounds()),
      tokens_per_pass(TokensPerPassBounds()) {}

void RequestMetrics::OnEmit(int64_t tokens, bool first, double seconds) {
  if (tokens > 0 && !first) itl.Observe(seconds);
}

void RequestMetrics::OnRequestDone(const engine::RequestOutcome& o, double first_token_seconds) {
  e2e.Observe(o.total_seconds);
  queue.Observe(o.queue_seconds);
  const int64_t n = static_cast<int64_t>(o.output.size());
  if (first_token_seconds >= 0) {
    ttft.Observe(first_token_seconds);
    if (n > 1)
      tpot.Observe(std::max(0.0, o.total_seconds - first_token_seconds) /
                   static_cast<double>(n - 1));
  }
  if (o.stats.forward_passes() > 0) tokens_per_pass.Observe(o.stats.tokens_per_pass());
  if (!o.error.empty()) return;
  if (o.finish == decode::FinishReason::kStop) ++finished_stop;
  if (o.finish == decode::FinishReason::kLength) ++finished_length;
}

namespace {

// Label values in the exposition format: backslash, double quote and newline escaped.
std::string LabelValue(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}

  /// One metric family with one sample; `labels` is `{a="x",b="y"}` or empty.
  template <typename T>
  void Sample(std::string_view name, const char* type, std::string_view help, T value,
              std::string_view labels = {}) {
    Header(name, type, help);
    fmt::format_to(std::back_inserter(out_), "{}{} {}\n", name, labels, value);
  }

  /// A histogram family from a snapshot (read once per scrape, so the crossword and vLLM names
  /// of one histogram always agree).
  void Hist(std::string_view name, std::string_view help, const Histogram& h,
            const Histogram::Snapshot& s, std::string_view labels = {}) {
    Header(name, "histogram", help);
    // Inside the braces: the given labels, then le.
    std::string inner(labels.empty() ? std::string_view() : labels.substr(1, labels.size() - 2));
    if (!inner.empty()) inner += ',';
    auto it = std::back_inserter(out_);
    for (size_t i = 0; i < s.cumulative.size(); ++i)
      fmt::format_to(it, "{}_bucket{{{}le=\"{}\"}} {}\n", name, inner, h.bound_labels()[i],
                     s.cumulative[i]);
    fmt::format_to(it, "{}_bucket{{{}le=\"+Inf\"}} {}\n{}_sum{} {}\n{}_count{} {}\n", name, inner,
                   s.count, name, labels, s.sum, name, labels, s.count);
  }

 private:
  void Header(std::string_view name, const char* type, std::string_view help) {
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name,
                   type);
  }
  std::string& out_;
};

double Ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

}  // namespace

std::string RenderMetrics(const MetricsView& v, const RequestMetrics& r, MetricsCompat compat) {
  const engine::SchedulerMetrics& m = v.sched;
  std::string out;
  out.reserve(compat == MetricsCompat::kVllm ? 24 << 10 : 12 << 10);
  Writer w(out);
  const double kv_use = std::clamp(
      Ratio(static_cast<double>(m.kv_tokens_used), static_cast<double>(m.kv_tokens_total)), 0.0,
      1.0);
  const int64_t blocks =
      v.cache_block_tokens > 0 ? m.kv_tokens_total / v.cache_block_tokens : int64_t{0};
  const Histogram::Snapshot ttft = r.ttft.Read(), itl = r.itl.Read(), tpot = r.tpot.Read(),
                            e2e = r.e2e.Read(), queue = r.queue.Read(),
                            tpp = r.tokens_per_pass.Read();
  const int64_t finished_stop = r.finished_stop.load(), finished_length = r.finished_length.load();

  w.Sample("crossword_ready", "gauge", "1 once the model is loaded", v.ready ? 1 : 0);
  w.Sample("crossword_draining", "gauge",
           "1 after SIGTERM: running and queued requests finish, new ones get 503",
           v.draining ? 1 : 0);
  w.Sample("crossword_http_requests_total", "counter", "HTTP requests received", v.http_requests);
  w.Sample("crossword_http_client_errors_total", "counter", "HTTP answers with status 4xx",
           v.http_4xx);
  w.Sample("crossword_http_server_errors_total", "counter", "HTTP answers with status 5xx",
           v.http_5xx);
  w.Sample("crossword_requests_submitted_total", "counter", "generation requests queued",
           m.requests_submitted);
  w.Sample("crossword_requests_finished_total", "counter",
           "generation requests that ended by stop or length", m.requests_finished);
  w.Sample("crossword_requests_cancelled_total", "counter",
           "generation requests cancelled (client gone, server stopping)", m.requests_cancelled);
  w.Sample("crossword_requests_failed_total", "counter",
           "generation requests that failed in the engine", m.requests_failed);
  w.Sample("crossword_prompt_tokens_total", "counter", "prompt tokens of requests that got a slot",
           m.prompt_tokens);
  w.Sample("crossword_prompt_tokens_cached_total", "counter",
           "prompt tokens resumed from the prompt cache", m.prompt_tokens_cached);
  w.Sample("crossword_prefix_cache_queries_total", "counter",
           "prompt tokens looked up in the prompt cache (tokens, as vLLM counts)", m.prompt_tokens);
  w.Sample("crossword_prefix_cache_hits_total", "counter",
           "prompt tokens found in the prompt cache (resumed, not evaluated)",
           m.prompt_tokens_cached);
  w.Sample("crossword_generated_tokens_total", "counter", "tokens generated", m.generated_tokens);
  w.Sample("crossword_forward_passes_total", "counter", "batched forward passes", m.forward_passes);
  w.Sample("crossword_forward_tokens_total", "counter", "tokens processed by forward passes",
           m.forward_tokens);
  w.Sample("crossword_busy_seconds_total", "counter",
           "seconds spent in forward passes and sampling", m.busy_seconds);
  w.Sample("crossword_tokens_per_second", "gauge", "generated tokens per busy second since start",
           Ratio(static_cast<double>(m.generated_tokens), m.busy_seconds));
  w.Sample("crossword_tokens_per_pass", "gauge", "generated tokens per forward pass since start",
           Ratio(static_cast<double>(m.generated_tokens), static_cast<double>(m.forward_passes)));
  w.Sample("crossword_sequences_per_pass", "gauge", "mean sequences batched in one forward pass",
           Ratio(static_cast<double>(m.forward_sequences), static_cast<double>(m.forward_passes)));
  w.Sample("crossword_queue_length", "gauge", "requests waiting for a slot", m.queue_length);
  w.Sample("crossword_slots_busy", "gauge", "slots decoding a request (requests running)",
           m.slots_busy);
  w.Sample("crossword_slots", "gauge", "slots (-np)", v.n_slots);
  w.Sample("crossword_slot_utilization", "gauge", "busy slots / slots",
           Ratio(m.slots_busy, v.n_slots));
  w.Sample("crossword_kv_cache_usage_ratio", "gauge",
           "context (KV cache) held by running requests, a fraction of all slots' context", kv_use);
  w.Sample("crossword_cache_config_info", "gauge",
           "prompt-cache configuration: block_size = tokens between checkpoints, num_blocks = "
           "slots x context per slot / block_size",
           1, fmt::format("{{block_size=\"{}\",num_blocks=\"{}\"}}", v.cache_block_tokens, blocks));
  w.Hist("crossword_time_to_first_token_seconds", "seconds from queueing to the first token",
         r.ttft, ttft);
  w.Hist("crossword_inter_token_latency_seconds",
         "seconds between two forward passes that emitted tokens of one request", r.itl, itl);
  w.Hist("crossword_time_per_output_token_seconds",
         "per request: seconds after the first token / (tokens - 1)", r.tpot, tpot);
  w.Hist("crossword_e2e_request_latency_seconds", "seconds from queueing to the end of a request",
         r.e2e, e2e);
  w.Hist("crossword_request_queue_time_seconds", "seconds a request waited for a slot", r.queue,
         queue);
  w.Hist("crossword_request_tokens_per_pass",
         "per request: tokens generated per forward pass (above 1 in diffusion and spec modes)",
         r.tokens_per_pass, tpp);

  if (compat == MetricsCompat::kVllm) {
    const std::string model = fmt::format("{{model_name=\"{}\"}}", LabelValue(v.model_name));
    const std::string model_inner = model.substr(1, model.size() - 2);
    w.Sample("vllm:num_requests_waiting", "gauge", "= crossword_queue_length", m.queue_length,
             model);
    w.Sample("vllm:num_requests_running", "gauge", "= crossword_slots_busy", m.slots_busy, model);
    w.Sample("vllm:kv_cache_usage_perc", "gauge",
             "= crossword_kv_cache_usage_ratio (a fraction, 0-1)", kv_use, model);
    w.Sample("vllm:cache_config_info", "gauge", "= crossword_cache_config_info", 1,
             fmt::format("{{{},block_size=\"{}\",num_gpu_blocks=\"{}\"}}", model_inner,
                         v.cache_block_tokens, blocks));
    w.Sample("vllm:prompt_tokens_total", "counter", "= crossword_prompt_tokens_total",
             m.prompt_tokens, model);
    w.Sample("vllm:generation_tokens_total", "counter", "= crossword_generated_tokens_total",
             m.generated_tokens, model);
    // One family, two samples (stop and length).
    fmt::format_to(std::back_inserter(out),
                   "# HELP vllm:request_success_total requests ended by stop or length, by reason\n"
                   "# TYPE vllm:request_success_total counter\n"
                   "vllm:request_success_total{{{},finished_reason=\"stop\"}} {}\n"
                   "vllm:request_success_total{{{},finished_reason=\"length\"}} {}\n",
                   model_inner, finished_stop, model_inner, finished_length);
    w.Sample("vllm:prefix_cache_queries_total", "counter", "= crossword_prefix_cache_queries_total",
             m.prompt_tokens, model);
    w.Sample("vllm:prefix_cache_hits_total", "counter", "= crossword_prefix_cache_hits_total",
             m.prompt_tokens_cached, model);
    w.Hist("vllm:time_to_first_token_seconds", "= crossword_time_to_first_token_seconds", r.ttft,
           ttft, model);
    w.Hist("vllm:inter_token_latency_seconds", "= crossword_inter_token_latency_seconds", r.itl,
           itl, model);
    w.Hist("vllm:time_per_output_token_seconds", "= crossword_time_per_output_token_seconds",
           r.tpot, tpot, model);
    w.Hist("vllm:e2e_request_latency_seconds", "= crossword_e2e_request_latency_seconds", r.e2e,
           e2e, model);
    w.Hist("vllm:request_queue_time_seconds", "= crossword_request_queue_time_seconds", r.queue,
           queue, model);
  }
  return out;
}

}  // namespace crossword::server
