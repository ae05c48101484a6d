// Internals of the server shared by its source files (routes in server.cc, generation endpoints
// in completions.cc). Not part of the library's interface.
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/output.h"
#include "server/server.h"

namespace crossword::server {

/// One generation request in flight: filled by the scheduler thread (callbacks), drained by the
/// HTTP thread that answers the client.
struct Exchange {
  explicit Exchange(const tokenizer::Tokenizer& tok, OutputOptions o) : stream(tok, std::move(o)) {}
  std::mutex mu;
  std::condition_variable cv;
  std::vector<chat::StreamDelta> deltas;  // decided, not yet taken by the HTTP thread
  bool done = false;
  engine::RequestOutcome outcome;
  bool stopped = false;        // a stop string or the single-tool-call rule ended it
  double first_token_at = -1;  // seconds since submit
  std::vector<nlohmann::ordered_json> logprobs;   // per-token entries not yet taken
  std::shared_ptr<engine::RequestHandle> handle;  // the running part (a forced call adds one)
  bool cancelled = false;
  /// Cancels the request (any thread): the running part and any continuation.
  void Cancel() {
    std::lock_guard lk(mu);
    cancelled = true;
    if (handle) handle->Cancel();
  }
  // Scheduler thread only.
  OutputStream stream;
  std::vector<chat::StreamDelta> scratch;
  std::chrono::steady_clock::time_point submitted;
  // tool_choice required / named with thinking on: when the reasoning ends (`</think>`), the
  // generation stops and continues from prompt + answer + the call's opening.
  struct Force {
    bool armed = false, triggered = false;
    int32_t think_end = -1;
    std::string text;             // "\n\n<tool_call>\n<function=NAME>\n"
    std::vector<int32_t> tokens;  // its tokens
    // The tool-call grammar of the continuation (the reasoning before it is free text).
    std::shared_ptr<const grammar::CompiledGrammar> grammar;
  } force;
  std::vector<int32_t> prompt;  // prompt of the running part
  decode::DecodeParams params;  // its parameters
  bool use_cache = true;
  bool streaming = false;  // the HTTP thread waits for deltas (else only for `done`)
  int top_logprobs = -1;
  engine::RequestOutcome first;  // outcome of the part before a continuation
  bool continued = false;
};

/// What the two generation endpoints need once a request is parsed and its prompt tokenized.
struct GenerationJob {
  bool chat = true;
  std::vector<int32_t> prompt;
  GenerationRequest gen;  // decoding parameters, stop strings, stream flags
  Exchange::Force force;  // tool-call forcing after the reasoning (armed when needed)
  OutputOptions output;
  std::string prompt_text;  // for --log-prompts
};

struct Server::Impl {
  explicit Impl(ServerOptions o) : options(std::move(o)), log(options.engine.logger) {}

  ServerOptions options;
  Logger log;
  httplib::Server http;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<engine::Scheduler> scheduler;
  std::atomic<bool> ready{false};
  std::atomic<bool> stopping{false};  // Stop() was called: waiting handlers cancel and return
  std::atomic<bool> draining{false};  // BeginDrain(): no new generations, the rest finish
  std::atomic<int64_t> in_flight{0};  // generation requests not yet fully answered
  RequestMetrics request_metrics;     // latency histograms (metrics.h)
  RequestDefaults defaults;
  int64_t n_ctx_slot = 0;
  std::string model_name;
  int64_t created = 0;  // unix seconds at start

  // HTTP-level counters for /metrics.
  std::atomic<int64_t> http_requests{0}, http_4xx{0}, http_5xx{0};

  // Extra text for the one log line of a request, keyed by the request object.
  std::mutex log_mu;
  std::unordered_map<const httplib::Request*, std::string> log_extra;
  void SetLogExtra(const httplib::Request& req, std::string text);

  std::mutex rng_mu;
  std::mt19937_64 rng{std::random_device{}()};
  /// prefix + 24 random alphanumerics (OpenAI-style ids).
  std::string NewId(const char* prefix);

  void Setup();
  /// The flag checks that need no model; Run() does them before binding the port, so a bad flag
  /// exits before the "listening" line. Throws crossword::Error naming the flag.
  void CheckOptions() const;
  void Load();
  void Route(const std::string& method, const std::string& pattern,
             std::function<void(const httplib::Request&, httplib::Response&)> fn);
  void HandleChat(const httplib::Request& req, httplib::Response& res);
  void HandleCompletion(const httplib::Request& req, httplib::Response& res);
  void HandleApplyTemplate(const httplib::Request& req, httplib::Response& res);
  void HandleTokenize(const httplib::Request& req, httplib::Response& res);
  void HandleDetokenize(const httplib::Request& req, httplib::Response& res);
  void HandleModels(const httplib::Request& req, httplib::Response& res);
  void HandleMetrics(const httplib::Request& req, httplib::Response& res);
  /// Queues one part of an exchange (the request, or its continuation after a forced call's
  /// opening) with callbacks that feed the exchange. Throws crossword::Error as Submit does.
  std::shared_ptr<engine::RequestHandle> SubmitPart(const std::shared_ptr<Exchange>& ex);
  /// Runs a parsed job: submits it and answers (stream or not).
  void Generate(const httplib::Request& req, httplib::Response& res, GenerationJob job);
  void RequireReady() const;
};

/// Writes OpenAI's error JSON with the error's status.
void SendError(httplib::Response& res, const ApiError& e);
/// JSON serialization that never throws on odd bytes (replaced by U+FFFD).
std::string Dump(const nlohmann::ordered_json& j);

}  // namespace crossword::server
