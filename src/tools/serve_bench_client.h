// The load generator of `crossword bench serve`: prompts of exact token lengths from a dataset, a
// streaming OpenAI-API client, and runs of N requests under a request rate and a concurrency cap.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/serve_bench.h"

namespace crossword::tools::servebench {

/// The server under test.
struct Target {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string endpoint = "/v1/completions";  ///< or /v1/chat/completions
  std::string model;                         ///< "model" field (empty: omitted)
  std::string api_key;                       ///< Bearer token (empty: none)
  double timeout_s = 600;                    ///< per-request read timeout
  bool Chat() const { return endpoint.find("chat") != std::string::npos; }
};

/// Parses "http://HOST:PORT[/...]" into host and port (path ignored). Throws crossword::Error.
Target ParseUrl(const std::string& url);

/// One request to send.
struct RequestSpec {
  std::vector<int32_t> prompt_ids;  ///< the prompt (completions endpoint)
  std::string prompt_text;          ///< the same prompt detokenized (chat endpoint)
  int64_t prompt_tokens = 0;
  int64_t max_tokens = 0;
};

/// GET `path`; returns the status (0 when the connection failed) and the body in `body`.
int HttpGet(const Target& t, const std::string& path, std::string* body, double timeout_s = 5);

/// POST /tokenize {"content": text} -> ids (llama-server's route, which crossword also serves).
std::vector<int32_t> Tokenize(const Target& t, const std::string& text);
/// POST /detokenize {"tokens": ids} -> text.
std::string Detokenize(const Target& t, const std::vector<int32_t>& ids);

/// A non-streamed chat answer.
struct ChatAnswer {
  std::string text;                ///< reasoning_content and content joined
  int64_t prompt_tokens = -1;      ///< usage.prompt_tokens (-1: not reported)
  int64_t completion_tokens = -1;  ///< usage.completion_tokens (-1: not reported)
  double seconds = 0;              ///< request to full answer
};

/// POST /v1/chat/completions with one user `question`, greedy, non-streamed, at most `max_tokens`.
/// Throws crossword::Error on failure.
ChatAnswer Chat(const Target& t, const std::string& question, int max_tokens);

/// Chat(...).text.
std::string AskChat(const Target& t, const std::string& question, int max_tokens);

/// Text of a dataset: "random" (seeded synthesized words), "bible" (bible-kjv's `bible` program,
/// the whole King James text), "fortunes" (fortunes-min's cookies), or "file:PATH". At most
/// `max_chars` characters. Throws crossword::Error when the source is missing.
std::string DatasetText(const std::string& dataset, size_t max_chars, uint64_t seed);

/// Shape of the requests of one step.
struct RequestShape {
  int64_t num_prompts = 0;
  int64_t input_len = 0;   ///< prompt tokens (vLLM --random-input-len)
  int64_t output_len = 0;  ///< answer tokens (sent with ignore_eos)
  double range_ratio = 0;  ///< lengths uniform in [len * (1 - r), len * (1 + r)]
  uint64_t seed = 0;
};

/// `shape.num_prompts` requests whose prompts are different windows of `corpus_ids` of the drawn
/// lengths (windows spread over the corpus; they overlap only when it is too short).
std::vector<RequestSpec> BuildRequests(const std::vector<int32_t>& corpus_ids,
                                       const RequestShape& shape);

/// The JSON body of one streamed request: greedy, ignore_eos, usage in the stream, with
/// `extra_body` merged over it (vLLM's --extra-body).
nlohmann::ordered_json RequestBody(const Target& t, const RequestSpec& r,
                                   const nlohmann::ordered_json& extra_body);

using Clock = std::chrono::steady_clock;

/// Sends one streamed request and records its timings (start_s measured from `epoch`).
RequestRecord SendRequest(const Target& t, const RequestSpec& r,
                          const nlohmann::ordered_json& extra_body, Clock::time_point epoch);

/// How the requests of one run arrive.
struct LoadOptions {
  double request_rate = std::numeric_limits<double>::infinity();  ///< requests/s (inf: all at 0)
  double burstiness = 1;    ///< gamma shape of the gaps (1: Poisson)
  int max_concurrency = 0;  ///< requests in flight at most (0: unlimited)
  uint64_t seed = 0;
  std::function<void(int64_t done, int64_t total)> progress;  ///< called as requests finish
};

/// A run: the records (in request order) and its duration (first send to last byte).
struct RunResult {
  std::vector<RequestRecord> records;
  double duration_s = 0;
};

/// Sends `requests` under `load` (one thread per request in flight) and waits for all of them.
RunResult RunLoad(const Target& t, const std::vector<RequestSpec>& requests,
                  const nlohmann::ordered_json& extra_body, const LoadOptions& load);

}  // namespace crossword::tools::servebench
