// `crossword bench serve`: the serving benchmark method of vLLM's and SGLang's `benchmark_serving`
// for any OpenAI-compatible server (crossword, llama-server, vLLM, ...), built in.
//
// A run sends N streamed requests with prompts of a fixed token length (taken from a dataset and
// cut to length with the server's own /tokenize), arriving as a Poisson (or gamma) process of a
// given rate, at most C in flight, and measures per request the time to first token (TTFT), the
// time per output token after the first (TPOT), the gaps between streamed chunks (ITL) and the
// end-to-end latency (E2EL); per run the request and token throughputs and the goodput under SLOs.
// Definitions follow vLLM's benchmarks/benchmark_serving.py (calculate_metrics), see
// docs/bench.md.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace crossword::tools::servebench {

/// One request as the client saw it. Times are seconds; `start_s` is from the run's start.
struct RequestRecord {
  bool ok = false;
  std::string error;            ///< why it failed (HTTP status, transport, server error event)
  int64_t prompt_tokens = 0;    ///< usage.prompt_tokens, else the dataset's count
  int64_t output_tokens = 0;    ///< usage.completion_tokens, else timings.predicted_n, else chunks
  double start_s = 0;           ///< when the request was sent
  double ttft_s = 0;            ///< first chunk carrying text, from start_s
  double e2e_s = 0;             ///< last byte of the stream, from start_s
  std::vector<double> itl_s;    ///< gaps between consecutive text-carrying chunks
  int64_t chunks = 0;           ///< text-carrying chunks (several tokens each in parallel modes)
  double tokens_per_pass = -1;  ///< crossword's timings.tokens_per_pass (< 0: not reported)
  double mean_accepted = -1;    ///< crossword's timings.mean_accepted (< 0: not reported)
};

/// Service-level objectives for goodput, in milliseconds (< 0: not set). A request is "good" when
/// it meets every set one (vLLM's --goodput ttft:MS tpot:MS e2el:MS).
struct Slo {
  double ttft_ms = -1;
  double tpot_ms = -1;
  double e2el_ms = -1;
  bool Any() const { return ttft_ms >= 0 || tpot_ms >= 0 || e2el_ms >= 0; }
};

/// Parses "ttft:500 tpot:50" / "ttft:500,e2el:2000" (ms). Throws crossword::Error on bad input.
Slo ParseSlo(const std::string& text);

/// Summary of one latency distribution in milliseconds; all 0 with n == 0.
struct Distribution {
  int64_t n = 0;
  double mean = 0, median = 0, std = 0, min = 0, max = 0;
  std::map<double, double> percentiles;  ///< p (e.g. 99) -> value
};

/// The metrics of one run.
struct Metrics {
  int64_t completed = 0, failed = 0;
  double duration_s = 0;
  int64_t total_input = 0, total_output = 0;
  double request_throughput = 0;      ///< completed requests / duration (req/s)
  double output_throughput = 0;       ///< output tokens / duration (tok/s)
  double total_token_throughput = 0;  ///< (input + output tokens) / duration (tok/s)
  int64_t good_completed = -1;        ///< requests meeting the SLOs (-1: no SLO given)
  double request_goodput = -1;        ///< good_completed / duration (-1: no SLO given)
  int64_t peak_concurrency = 0;       ///< most requests in flight at once (from their intervals)
  double tokens_per_chunk = 0;        ///< output tokens / text-carrying chunks
  double tokens_per_pass = -1;        ///< mean of the server's reports (-1: none)
  double mean_accepted = -1;          ///< mean of the server's reports (-1: none)
  Distribution ttft_ms, tpot_ms, itl_ms, e2el_ms;
  std::vector<std::string> errors;  ///< the first few failure messages
};

/// numpy.percentile's default (linear interpolation between closest ranks) of a sorted sample.
/// `p` in [0, 100]. An empty sample gives 0.
double Percentile(const std::vector<double>& sorted, double p);

/// mean / median / population std / min / max / percentiles of `values` (any order).
Distribution Summarize(std::vector<double> values, const std::vector<double>& percentiles);

/// The metrics of a run that lasted `duration_s` (first send to last byte), as vLLM's
/// calculate_metrics: TPOT = (E2EL - TTFT) / (output_tokens - 1) over requests with more than one
/// output token; ITL pools every gap of every request; for goodput a request with <= 1 output
/// token has TPOT 0. Failed requests count only in `failed`.
Metrics ComputeMetrics(const std::vector<RequestRecord>& records, double duration_s, const Slo& slo,
                       const std::vector<double>& percentiles);

/// Send offsets (seconds from the run's start) of `n` requests arriving at `rate` requests/s:
/// gaps drawn from a gamma distribution of shape `burstiness` and mean 1 / rate (burstiness 1 is a
/// Poisson process), seeded; rate = infinity sends all at offset 0 (vLLM's --request-rate inf).
std::vector<double> ArrivalOffsets(int64_t n, double rate, double burstiness, uint64_t seed);

/// The run's metrics as JSON (names as vLLM's result file: mean_ttft_ms, p99_itl_ms, ...).
nlohmann::ordered_json MetricsJson(const Metrics& m);

/// Parses one server-sent-events `data:` payload of an OpenAI streamed completion into `rec`
/// (arrival time `t_s` from the request's start): a chunk with non-empty text / content /
/// reasoning_content is a token chunk (first one sets TTFT, the next ones add ITL gaps); `usage`
/// and llama-server/crossword `timings` set the token counts. Returns false on an error event
/// (rec.error set). `last_chunk_s` carries the previous token chunk's time between calls.
bool ParseStreamEvent(const std::string& data, double t_s, RequestRecord& rec,
                      double& last_chunk_s);

/// Incremental splitter of an SSE byte stream into `data:` payloads (events end at a blank line;
/// "\r\n" tolerated). Feed bytes; complete payloads come back in order.
class SseSplitter {
 public:
  std::vector<std::string> Feed(const char* data, size_t n);

 private:
  std::string buffer_;
};

}  // namespace crossword::tools::servebench
