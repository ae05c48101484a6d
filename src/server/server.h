// `crossword serve`: an OpenAI-compatible HTTP server (Boost.Beast, server/http.h) over the
// engine's scheduler. Routes, flags and behaviour are documented in docs/server.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "server/api.h"
#include "server/metrics.h"

namespace crossword::server {

struct ServerOptions {
  engine::EngineOptions engine;    ///< model path (empty: embedded), threads, logger
  std::string host = "127.0.0.1";  ///< bind address; loopback unless told otherwise
  int port = 8080;                 ///< 0: any free port (the log line names it)
  int n_slots = 1;                 ///< -np: requests decoded at once
  int64_t n_ctx =
      0;  ///< -c: total context split over slots; 0: 4096 per slot (or the model's, if smaller)
  GgmlType kv_type = GgmlType::kF16;
  int64_t batch_tokens = 512;  ///< -b: tokens per forward pass over all slots
  std::string alias;           ///< model id in responses (default: the file name's stem)
  /// Non-empty: every route but /health (and CORS preflights) needs `Authorization: Bearer KEY`
  /// (Anthropic routes also `x-api-key: KEY`) with one of these keys.
  std::vector<std::string> api_keys;
  /// CORS (llama-server's --cors-* flags): which origins get Access-Control-Allow-Origin.
  struct Cors {
    /// Comma-separated origins; "*": any (reflected when credentials are allowed, as
    /// llama-server); "localhost": an Origin on localhost / 127.0.0.1 / [::1] is reflected.
    std::string origins = "localhost";
    std::string methods = "GET, POST, DELETE, OPTIONS";
    std::string headers = "*";
    bool credentials = true;
  } cors;
  bool log_prompts = false;          ///< log prompt and answer text (off: only sizes and timings)
  size_t max_body_bytes = 8u << 20;  ///< larger request bodies get 413 (any encoding)
  double header_timeout_s = 10;      ///< a request's header must arrive within this (else 408)
  double request_timeout_s = 60;     ///< a whole request, header and body (else 408)
  int http_threads = 0;              ///< 0: max(16, 4 x slots + 8)
  size_t max_queue = 1024;
  // Request defaults.
  /// --mode, --block-size, --threshold, --draft-max, --draft-p-min, --temp, --seed, ...
  decode::DecodeOverrides decoding;
  int64_t n_predict = -1;  ///< -n: max_tokens of a request that gives none (-1: context left)
  int max_block_size = 0;  ///< 0: max(32, the default block size)
  bool no_dllm_biases = false;
  ReasoningFormat reasoning_format = ReasoningFormat::kDeepseek;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  // Prompt cache.
  int64_t checkpoint_interval = 256;
  int max_checkpoints = 8;
  /// --metrics-compat vllm: /metrics also shows vLLM's names (docs/deploy.md).
  MetricsCompat metrics_compat = MetricsCompat::kNone;
  bool no_slots = false;  ///< --no-slots: GET /slots answers 501
  bool no_webui = false;  ///< --no-webui: no chat page at /
};

/// The server. Run() binds the port first (so /health answers "loading" while the model loads),
/// then loads the model and serves until Stop().
class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Binds host:port, loads the model, serves. Returns after Stop(). Throws crossword::Error when
  /// the address cannot be bound or the model cannot be loaded (the message says which).
  void Run();
  /// Stops serving (any thread; idempotent). Active requests are cancelled.
  void Stop();
  /// Starts a graceful drain (any thread; idempotent): /health answers 503 "draining", new
  /// generation requests get 503, queued and running ones go on. Stop() ends it.
  void BeginDrain();
  /// Generation requests not yet fully answered (queued, running, or a stream still being
  /// written). After BeginDrain, 0 means Stop() loses nothing.
  int64_t InFlight() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crossword::server
