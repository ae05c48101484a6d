// The steps of `crossword bench serve`: measured load steps (the classic grid and the parts
// decode, prefill, conc, ctx), the known-answer guard, memory per context size on freshly started
// servers (mem) and a needle in the long prompt (needle). Each step returns its JSON record.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/serve_bench.h"
#include "tools/serve_bench_client.h"
#include "tools/serve_bench_spawn.h"

namespace crossword::tools::servebench {

/// The flags of `crossword bench serve` (see RegisterBenchServeCommand for their meaning).
struct BenchFlags {
  std::string url, spawn, mem_spawn, spawn_log, endpoint = "/v1/completions", model, api_key;
  std::string dataset = "random";
  std::vector<int64_t> input_lens = {1024};
  int64_t output_len = 128;
  double range_ratio = 0;
  int64_t num_prompts = 16;
  std::vector<std::string> rates = {"inf"};
  double burstiness = 1;
  std::vector<int> concurrencies = {0};
  int warmup = 1, runs = 1;
  uint64_t seed = 0;
  std::string goodput, percentiles = "50,90,95,99", result_file, label, output = "md";
  std::string extra_body, model_file, charts_dir;
  std::vector<std::string> compare;
  std::string known_answer = "What is the capital of France?=>Paris";
  bool no_known_answer = false;
  double guard_max_other = 0.5;
  int guard_retries = 2;
  double spawn_timeout = 600, timeout = 600;
  // --parts and their sizes (Clover's reference method by default).
  std::vector<std::string> parts;
  int64_t decode_input_len = 128;
  int64_t prefill_len = 512;
  std::vector<int> conc_levels = {1, 2, 4, 8};
  int64_t conc_input_len = 128;
  std::vector<int64_t> ctx_ladder = {16384, 32768, 65536, 130048};
  int64_t ctx_output_len = 512;
  std::vector<int64_t> needle_ctx;  ///< empty: the ctx ladder
  std::vector<double> needle_depths = {0.1, 0.5, 0.9};
  int needle_max_tokens = 64;
};

/// The parts --parts accepts, in the order of the reference method.
const std::vector<std::string>& KnownParts();

/// One measured load step: `num_prompts` requests of `input_len` prompt and `output_len` answer
/// tokens under a concurrency cap and a request rate, after warm-up, `runs` times.
struct StepSpec {
  std::string part = "grid";  ///< grid (--input-len x --max-concurrency x --request-rate), decode,
                              ///< prefill, conc or ctx
  int64_t input_len = 0, output_len = 0, num_prompts = 0;
  int concurrency = 0;       ///< 0: unlimited
  std::string rate = "inf";  ///< requests/s as given, or inf
};

/// Runs steps against the server at --url, or one started per step by --spawn. Not thread-safe.
class StepRunner {
 public:
  /// `corpus_tokens`: how many dataset tokens the longest step needs (prompts longer than the
  /// tokenized dataset repeat it). Throws crossword::Error on bad flags.
  StepRunner(const BenchFlags& flags, int64_t corpus_tokens);
  ~StepRunner();

  const std::vector<double>& percentiles() const { return pcts_; }
  const nlohmann::ordered_json& extra_body() const { return extra_; }

  /// A measured step: per run the vLLM metrics (MetricsJson) plus decode_tok_s (1000 / median
  /// TPOT) and prefill_tok_s (mean prompt tokens / median TTFT), the load guard's record, the
  /// known-answer check; medians and spread over runs; the server's peak RSS (MiB).
  nlohmann::ordered_json Measured(const StepSpec& spec);
  /// The known-answer question alone. Throws crossword::Error on a wrong answer (unless
  /// --no-known-answer, recorded).
  nlohmann::ordered_json Guard();
  /// Memory per context size: per size a freshly started server (--mem-spawn, else --spawn, with
  /// {ctx} = size + answer tokens), its RSS idle, then one request of exactly `size` prompt tokens
  /// and ctx_output_len answer tokens, then its RSS and peak RSS (VmRSS / VmHWM, MiB). A size
  /// whose server fails to start or answer is recorded with ok false and the error. Needs --spawn.
  std::vector<nlohmann::ordered_json> Mem(const std::vector<int64_t>& sizes);
  /// Needle in a haystack: per size (a fresh server with --spawn) and depth in [0, 1], a chat
  /// prompt of about `size` tokens (dataset filler, a sentence "The secret code is NNNNN." at
  /// `depth` of the filler, the question last), greedy; pass = the answer contains the code.
  std::vector<nlohmann::ordered_json> Needle(const std::vector<int64_t>& sizes,
                                             const std::vector<double>& depths);

 private:
  // A server for one step (nullptr with --url; then target_ is the --url server).
  std::unique_ptr<SpawnedServer> Start(const std::string& command_template, int64_t ctx);
  // The known-answer check (asked once for a --url server, per spawned server).
  nlohmann::ordered_json KnownAnswer(bool spawned);
  void EnsureCorpus();
  // The server's pid: the spawned one, else the one listening on the --url port (-1: unknown).
  pid_t ServerPid(const SpawnedServer* server) const;

  const BenchFlags& f_;
  Target target_;
  std::vector<double> pcts_;
  Slo slo_;
  nlohmann::ordered_json extra_;
  std::string spawn_log_;
  int64_t corpus_tokens_;
  std::vector<int32_t> corpus_;        ///< the dataset tokenized by the first server
  nlohmann::ordered_json url_answer_;  ///< the known-answer check of the --url server (once)
};

/// The needle's code for a size and depth (5 digits, from the seed).
std::string NeedleCode(uint64_t seed, int64_t size, double depth);

}  // namespace crossword::tools::servebench
