// Internals of the server shared by its source files (routes in server.cc, generation endpoints
// in completions.cc). Not part of the library's interface.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/exchange.h"
#include "server/http.h"
#include "server/output.h"
#include "server/server.h"

namespace crossword::server {

/// What a generation endpoint hands the exchange runner once a request is parsed and its prompt
/// tokenized: the job and the protocol's writer.
struct GenerationJob {
  std::string prompt_param = "messages";  // the request field a too-long prompt is blamed on
  const char* id_prefix = "chatcmpl-";    // of the response id
  std::function<std::unique_ptr<ProtocolWriter>(WriterContext)> writer;
  std::vector<int32_t> prompt;
  std::vector<std::vector<int32_t>> more_prompts;  // /v1/completions: one choice each
  GenerationRequest gen;  // decoding parameters, stop strings, stream flags
  Exchange::Force force;  // tool-call forcing after the reasoning (armed when needed)
  OutputOptions output;
  std::string prompt_text;                                         // for --log-prompts
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // the tools the model sees
};

/// How a route authenticates and answers errors.
struct RouteSpec {
  ErrorShape errors = ErrorShape::kOpenAi;
  bool needs_model = true;  ///< 503 until the model is loaded
  bool open = false;        ///< answers without the API key (health, the page's files)
  bool x_api_key = false;   ///< the key may also come as `x-api-key: KEY` (Anthropic clients)
};

/// The transport's limits from the server's flags.
http::Limits TransportLimits(const ServerOptions& o);

struct Server::Impl {
  explicit Impl(ServerOptions o)
      : options(std::move(o)), log(options.engine.logger), transport(TransportLimits(options)) {}

  ServerOptions options;
  Logger log;
  http::HttpServer transport;
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
  std::unordered_map<const http::Request*, std::string> log_extra;
  void SetLogExtra(const http::Request& req, std::string text);

  std::mutex rng_mu;
  std::mt19937_64 rng{std::random_device{}()};
  /// prefix + 24 random alphanumerics (OpenAI-style ids).
  std::string NewId(const char* prefix);

  void Setup();
  /// The flag checks that need no model; Run() does them before binding the port, so a bad flag
  /// exits before the "listening" line. Throws crossword::Error naming the flag.
  void CheckOptions() const;
  void Load();
  /// Registers a handler for an exact path. The handler's ApiErrors become the spec's error body.
  void Route(const std::string& method, const std::string& path,
             std::function<void(const http::Request&, http::Response&)> fn, RouteSpec spec = {});
  /// Written by Setup() before the port is served, read-only afterwards: path -> its spec.
  std::unordered_map<std::string, RouteSpec> route_specs;
  void HandleChat(const http::Request& req, http::Response& res);
  void HandleCompletion(const http::Request& req, http::Response& res);
  /// llama-server's native POST /completion (and /completions) and /infill (llama_native.cc).
  void HandleNativeCompletion(const http::Request& req, http::Response& res, bool infill);
  void HandleMessages(const http::Request& req, http::Response& res);
  void HandleCountTokens(const http::Request& req, http::Response& res);
  void HandleResponses(const http::Request& req, http::Response& res);
  /// GET /, /app.js, /style.css: the chat page (webui.cc), unless --no-webui.
  void RouteWebUi();
  void HandleProps(const http::Request& req, http::Response& res);
  void HandleSlots(const http::Request& req, http::Response& res);
  void HandleApplyTemplate(const http::Request& req, http::Response& res);
  void HandleTokenize(const http::Request& req, http::Response& res);
  void HandleDetokenize(const http::Request& req, http::Response& res);
  void HandleModels(const http::Request& req, http::Response& res);
  void HandleMetrics(const http::Request& req, http::Response& res);
  /// Queues one part of an exchange (the request, or its continuation after a forced call's
  /// opening) with callbacks that feed the exchange. Throws crossword::Error as Submit does.
  std::shared_ptr<engine::RequestHandle> SubmitPart(const std::shared_ptr<Exchange>& ex);
  /// A chat request's job (prompt from the template, tool forcing, grammars), without a writer:
  /// every chat-shaped API (OpenAI chat, Anthropic Messages, OpenAI Responses) starts here.
  /// Throws ApiError(400) for messages the template rejects or grammars that do not compile.
  GenerationJob ChatJob(ChatRequest r);
  /// Runs a parsed job: submits it and answers (stream or not).
  void Generate(const http::Request& req, http::Response& res, GenerationJob job);
  void RequireReady() const;
};

/// llama-server's "params" / generation_settings object of decoding parameters (props.cc).
nlohmann::ordered_json ParamsJson(const decode::DecodeParams& p);

/// A float setting as the shortest decimal that reads back as the same float (0.95f as 0.95, not
/// the 0.949999988079071 that widening it to a double would print); props.cc.
double FloatJson(float v);

/// Writes the error's body in `shape` with the error's status.
void SendError(http::Response& res, const ApiError& e, ErrorShape shape = ErrorShape::kOpenAi);

}  // namespace crossword::server
