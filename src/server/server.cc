// Server: HTTP setup (threads, limits, auth, error bodies, one log line per request), model
// loading behind /health, and the small routes (models, metrics, tokenize, detokenize).
#include "server/server.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <limits>
#include <thread>

#include "server/cors.h"
#include "server/server_impl.h"
#include "tokenizer/utf8.h"

namespace crossword::server {

using json = nlohmann::ordered_json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void SendError(http::Response& res, const ApiError& e, ErrorShape shape) {
  res.status = e.status();
  res.set_content(Dump(ErrorJson(e, shape)), "application/json");
}

void Server::Impl::SetLogExtra(const http::Request& req, std::string text) {
  std::lock_guard lk(log_mu);
  log_extra[&req] = std::move(text);
}

std::string Server::Impl::NewId(const char* prefix) {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = prefix;
  std::lock_guard lk(rng_mu);
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

void Server::Impl::RequireReady() const {
  if (!ready.load())
    throw ApiError(503, "unavailable_error", "", "the model is still loading; retry shortly");
}

namespace {

// Constant-time comparison: the time taken does not reveal how much of a key matched.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0 && !b.empty();
}

const char* StatusText(int status) {
  switch (status) {
    case 400:
      return "bad request";
    case 401:
      return "unauthorized";
    case 404:
      return "not found";
    case 405:
      return "method not allowed";
    case 413:
      return "request body too large";
    case 503:
      return "unavailable";
    default:
      return "error";
  }
}

}  // namespace

void Server::Impl::Route(const std::string& method, const std::string& path,
                         std::function<void(const http::Request&, http::Response&)> fn,
                         RouteSpec spec) {
  route_specs[path] = spec;
  auto wrapped = [this, fn, spec](const http::Request& req, http::Response& res) {
    try {
      if (spec.needs_model) RequireReady();
      fn(req, res);
    } catch (const ApiError& e) {
      SendError(res, e, spec.errors);
      SetLogExtra(req, std::string("| ") + e.type() +
                           (e.param().empty() ? "" : " param " + e.param()) +
                           (options.log_prompts ? std::string(": ") + e.what() : ""));
    } catch (const std::exception& e) {
      log.Err("{} {}: internal error: {}", req.method, req.path, e.what());
      SendError(res, ApiError(500, "server_error", "", std::string("internal error: ") + e.what()),
                spec.errors);
    }
  };
  transport.Route(method, path, std::move(wrapped));
}

http::Limits TransportLimits(const ServerOptions& o) {
  http::Limits l;
  l.threads = o.http_threads > 0 ? o.http_threads : std::max(16, 4 * o.n_slots + 8);
  l.max_body = o.max_body_bytes;
  l.header_timeout_s = o.header_timeout_s;
  l.request_timeout_s = o.request_timeout_s;
  return l;
}

void Server::Impl::Setup() {
  transport.SetPreRouting([this](const http::Request& req, http::Response& res) {
    ++http_requests;
    const bool preflight = req.method == "OPTIONS";
    for (auto& [name, value] :
         CorsHeaders(options.cors, req.get_header_value("Origin"), preflight)) {
      res.set_header(name, value);
    }
    // A browser sends no Authorization on a preflight: it is answered before the key check.
    if (preflight) {  // 200 with an empty body, as llama-server
      res.status = 200;
      return true;
    }
    // Unknown paths are authenticated as OpenAI routes (a 401 before a 404 reveals nothing).
    const auto spec_it = route_specs.find(req.path);
    const RouteSpec spec = spec_it != route_specs.end() ? spec_it->second : RouteSpec{};
    if (options.api_keys.empty() || spec.open) return false;
    auto known = [this](const std::string& given) {
      bool ok = false;
      for (const std::string& key : options.api_keys) ok = SameSecret(given, key) || ok;
      return ok;
    };
    const std::string auth = req.get_header_value("Authorization");
    // RFC 9110 section 11.1: the scheme is case-insensitive ("bearer", "BEARER").
    constexpr std::string_view kBearer = "bearer ";
    const bool is_bearer =
        auth.size() >= kBearer.size() &&
        std::equal(kBearer.begin(), kBearer.end(), auth.begin(),
                   [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); });
    if (is_bearer && known(auth.substr(kBearer.size()))) {
      return false;
    }
    const std::string x_key = spec.x_api_key ? req.get_header_value("x-api-key") : "";
    if (!x_key.empty() && known(x_key)) {
      return false;
    }
    const bool none = auth.empty() && x_key.empty();
    SendError(res,
              ApiError(401, "invalid_request_error", "",
                       none ? (spec.x_api_key
                                   ? "missing API key: send 'x-api-key: KEY' or 'Authorization: "
                                     "Bearer KEY'"
                                   : "missing API key: send 'Authorization: Bearer KEY'")
                            : "incorrect API key provided",
                       "invalid_api_key"),
              spec.errors);
    return true;
  });
  // Bodies for errors the transport produces itself (404, 405, 408, 413, 417, 431, 400).
  transport.SetErrorBody([this](const http::Request& req, http::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = StatusText(res.status);
    if (res.status == 404) msg = "no route for " + req.method + " " + req.path;
    if (res.status == 405) msg = req.method + " is not allowed on " + req.path;
    if (res.status == 413)
      msg = "the request body is larger than this server accepts (--max-body-size)";
    if (res.status == 417)
      msg =
          "Expect: 100-continue refused: the body is larger than this server accepts "
          "(--max-body-size)";
    if (res.status == 408) msg = "the request did not arrive in time (--request-timeout)";
    if (res.status == 431) msg = "the request header is too large";
    if (res.status == 400 && !res.transport_error.empty())
      msg = "malformed HTTP request: " + res.transport_error;
    const std::string code = res.status == 413 || res.status == 417 ? "request_too_large" : "";
    const auto spec = route_specs.find(req.path);
    SendError(res,
              ApiError(res.status, res.status >= 500 ? "server_error" : "invalid_request_error", "",
                       msg, code),
              spec != route_specs.end() ? spec->second.errors : ErrorShape::kOpenAi);
  });
  transport.SetLogger([this](const http::Request& req, const http::Response& res) {
    if (res.status >= 500) {
      ++http_5xx;
    } else if (res.status >= 400) {
      ++http_4xx;
    }
    std::string extra;
    {
      std::lock_guard lk(log_mu);
      auto it = log_extra.find(&req);
      if (it != log_extra.end()) {
        extra = std::move(it->second);
        log_extra.erase(it);
      }
    }
    log.Info("{}:{} {} {} {} {}", req.remote_addr, req.remote_port, req.method, req.path,
             res.status, extra);
  });

  auto health = [this](const http::Request&, http::Response& res) {
    if (draining.load()) {
      res.status = 503;
      res.set_content(
          R"({"status":"draining","error":{"code":503,"message":"Shutting down","type":"unavailable_error"}})",
          "application/json");
    } else if (ready.load()) {
      res.set_content(R"({"status":"ok"})", "application/json");
    } else {
      res.status = 503;
      res.set_content(
          R"({"status":"loading","error":{"code":503,"message":"Loading model","type":"unavailable_error"}})",
          "application/json");
    }
  };
  const RouteSpec no_model{.needs_model = false};
  Route("GET", "/health", health, {.needs_model = false, .open = true});
  Route("GET", "/v1/health", health, {.needs_model = false, .open = true});
  for (const char* p : {"/v1/models", "/models"}) {
    Route(
        "GET", p, [this](const http::Request& q, http::Response& r) { HandleModels(q, r); },
        no_model);
  }
  Route(
      "GET", "/metrics", [this](const http::Request& q, http::Response& r) { HandleMetrics(q, r); },
      no_model);
  for (const char* p : {"/v1/chat/completions", "/chat/completions"}) {
    Route("POST", p, [this](const http::Request& q, http::Response& r) { HandleChat(q, r); });
  }
  Route("POST", "/v1/completions",
        [this](const http::Request& q, http::Response& r) { HandleCompletion(q, r); });
  for (const char* p : {"/completion", "/completions", "/infill"}) {
    const bool infill = std::string_view(p) == "/infill";
    Route("POST", p, [this, infill](const http::Request& q, http::Response& r) {
      HandleNativeCompletion(q, r, infill);
    });
  }
  const RouteSpec anthropic{.errors = ErrorShape::kAnthropic, .x_api_key = true};
  Route(
      "POST", "/v1/messages",
      [this](const http::Request& q, http::Response& r) { HandleMessages(q, r); }, anthropic);
  Route(
      "POST", "/v1/messages/count_tokens",
      [this](const http::Request& q, http::Response& r) { HandleCountTokens(q, r); }, anthropic);
  Route("POST", "/v1/responses",
        [this](const http::Request& q, http::Response& r) { HandleResponses(q, r); });
  Route("GET", "/props", [this](const http::Request& q, http::Response& r) { HandleProps(q, r); });
  Route("GET", "/slots", [this](const http::Request& q, http::Response& r) { HandleSlots(q, r); });
  RouteWebUi();
  Route("POST", "/apply-template",
        [this](const http::Request& q, http::Response& r) { HandleApplyTemplate(q, r); });
  Route("POST", "/tokenize",
        [this](const http::Request& q, http::Response& r) { HandleTokenize(q, r); });
  Route("POST", "/detokenize",
        [this](const http::Request& q, http::Response& r) { HandleDetokenize(q, r); });
}

void Server::Impl::CheckOptions() const {
  Check(options.n_slots >= 1, "-np must be >= 1 (got {})", options.n_slots);
  Check(options.engine.threads >= 0, "-t must be >= 0, 0 meaning all cores (got {})",
        options.engine.threads);
  Check(options.http_threads >= 0, "--threads-http must be >= 0 (got {})", options.http_threads);
  Check(options.n_predict >= -2 && options.n_predict <= std::numeric_limits<int32_t>::max(),
        "-n must be >= 1, or -1 (the rest of the context) (got {})", options.n_predict);
  Check(options.batch_tokens >= 1, "-b must be >= 1 (got {})", options.batch_tokens);
  Check(options.n_ctx >= 0, "-c must be >= 0, 0 meaning 4096 per slot (got {})", options.n_ctx);
  if (options.n_ctx > 0) {
    Check(options.n_ctx / options.n_slots >= 16,
          "-c {} over {} slots leaves {} tokens per slot; give at least 16 per slot", options.n_ctx,
          options.n_slots, options.n_ctx / options.n_slots);
  }
  Check(options.max_checkpoints >= 1, "--ctx-checkpoints must be >= 1 (got {})",
        options.max_checkpoints);
  Check(options.checkpoint_interval >= 1, "--ctx-checkpoint-interval must be >= 1 (got {})",
        options.checkpoint_interval);
  Check(
      options.max_block_size == 0 || (options.max_block_size >= 2 && options.max_block_size <= 256),
      "--max-block-size must be 0 (the default) or in [2, 256] (got {})", options.max_block_size);
  if (options.max_block_size > 0 && options.decoding.block_size &&
      *options.decoding.block_size > options.max_block_size) {
    Fail("--block-size {} exceeds --max-block-size {}", *options.decoding.block_size,
         options.max_block_size);
  }
  // The flags given, over valid stand-ins for the model's defaults (checked again after loading).
  decode::CheckDecodeRanges(options.decoding.Apply(decode::DecodeParams{}),
                            decode::ParamNames::kFlags);
}

void Server::Impl::Load() {
  engine = engine::Engine::Load(options.engine);
  const model::Hparams& hp = engine->model().hparams();
  // -c over -np was checked by CheckOptions, before the port was bound.
  n_ctx_slot = options.n_ctx > 0
                   ? options.n_ctx / options.n_slots
                   : (hp.n_ctx_train > 0 ? std::min<int64_t>(4096, hp.n_ctx_train) : 4096);
  decode::DecodeParams p = options.decoding.Apply(engine->DefaultDecodeParams());
  // The flags passed CheckOptions; a model default they leave in place may still be out of range.
  decode::CheckDecodeRanges(p, decode::ParamNames::kFlags);
  if (const std::string note = decode::DraftCapNote(p); !note.empty()) {
    engine->logger().Info("{}", note);
  }
  if (options.no_dllm_biases) p.dllm_biases = false;
  if (p.mode != decode::Mode::kAr && p.mask_id < 0) {
    Fail(
        "--mode {} needs a model with a mask token (tokenizer.ggml.mask_token_id); this one has "
        "none",
        options.decoding.mode);
  }
  if (const int n_layer = engine->model().hparams().n_layer;
      (p.draft_skip_ffn & ~model::SkippableFfnLayers(n_layer)) != 0) {
    Fail(
        "--draft-skip-ffn may name layers 0 .. {} of this model (the last layer's FFN feeds the "
        "head)",
        n_layer - 2);
  }
  defaults.params = p;
  defaults.reasoning_format = options.reasoning_format;
  defaults.kwargs = options.chat_template_kwargs;
  defaults.n_vocab = engine->tokenizer().n_vocab();
  defaults.n_layer = engine->model().hparams().n_layer;
  defaults.fixed_seed = options.decoding.seed.has_value() && !options.decoding.random_seed;
  defaults.n_predict = options.n_predict;
  engine::SchedulerOptions so;
  so.n_slots = options.n_slots;
  so.n_ctx = n_ctx_slot;
  so.kv_type = options.kv_type;
  so.batch_tokens = options.batch_tokens;
  so.max_block_size =
      options.max_block_size > 0 ? options.max_block_size : std::max(32, p.block_size);
  Check(p.block_size <= so.max_block_size, "--block-size {} exceeds --max-block-size {}",
        p.block_size, so.max_block_size);
  so.max_queue = options.max_queue;
  so.cache.interval = options.checkpoint_interval;
  so.cache.max_checkpoints = options.max_checkpoints;
  so.on_emit = [this](int64_t tokens, bool first, double seconds) {
    request_metrics.OnEmit(tokens, first, seconds);
  };
  // A long prompt (issue 24: 129k tokens prefilled for 41 minutes with no sign of life) logs its
  // progress every 5 s: tokens done, rate, time left. Scheduler thread only, so `next` needs no
  // lock.
  so.on_prefill = [this, due_at = std::vector<double>(static_cast<size_t>(options.n_slots), 5.0),
                   seen = std::vector<double>(static_cast<size_t>(options.n_slots), 0.0)](
                      int slot, int64_t done, int64_t total, double seconds) mutable {
    double& due = due_at[static_cast<size_t>(slot)];
    if (seconds < seen[static_cast<size_t>(slot)]) due = 5.0;  // a new prompt on this slot
    seen[static_cast<size_t>(slot)] = seconds;
    if (seconds < due) return;
    due = seconds + 5.0;
    const double rate = static_cast<double>(done) / seconds;
    log.Info("slot {}: prompt {}/{} tokens ({:.0f}%), {:.1f} tokens/s, ETA {:.0f} s", slot, done,
             total, 100.0 * static_cast<double>(done) / static_cast<double>(total), rate,
             static_cast<double>(total - done) / rate);
  };
  scheduler = std::make_unique<engine::Scheduler>(*engine, so);
  if (!options.alias.empty()) {
    model_name = options.alias;
  } else if (options.engine.model_path.empty()) {
    model_name = "clover-tiny";
  } else {
    model_name = std::filesystem::path(options.engine.model_path).stem().string();
  }
}

void Server::Impl::HandleModels(const http::Request&, http::Response& res) {
  json data = json::array();
  if (ready.load()) {
    const model::Hparams& hp = engine->model().hparams();
    data.push_back({{"id", model_name},
                    {"object", "model"},
                    {"created", created},
                    {"owned_by", "crossword"},
                    {"meta",
                     {{"arch", hp.arch},
                      {"n_vocab", engine->tokenizer().n_vocab()},
                      {"n_ctx_train", hp.n_ctx_train},
                      {"n_ctx_slot", n_ctx_slot},
                      {"n_slots", options.n_slots},
                      {"mode", decode::ModeName(defaults.params.mode)},
                      {"block_size", defaults.params.block_size},
                      {"threshold", FloatJson(defaults.params.threshold)},
                      {"draft_max",
                       defaults.params.draft_auto ? json("auto") : json(defaults.params.draft_max)},
                      {"draft_p_min", FloatJson(defaults.params.draft_p_min)}}}});
  }
  res.set_content(Dump({{"object", "list"}, {"data", data}}), "application/json");
}

void Server::Impl::HandleMetrics(const http::Request&, http::Response& res) {
  MetricsView v;
  v.ready = ready.load();
  v.draining = draining.load();
  v.http_requests = http_requests.load();
  v.http_4xx = http_4xx.load();
  v.http_5xx = http_5xx.load();
  if (v.ready) {  // Load() has written the scheduler and the name
    v.sched = scheduler->Metrics();
    v.model_name = model_name;
  }
  v.n_slots = options.n_slots;
  v.cache_block_tokens = options.checkpoint_interval;
  res.set_content(RenderMetrics(v, request_metrics, options.metrics_compat),
                  "text/plain; version=0.0.4");
}

void Server::Impl::HandleTokenize(const http::Request& req, http::Response& res) {
  const json body = ParseBody(req.body);
  auto it = body.find("content");
  if (it == body.end() || !it->is_string()) BadRequest("content", "'content' must be a string");
  bool parse_special = true, with_pieces = false;
  if (auto p = body.find("parse_special"); p != body.end()) {
    if (!p->is_boolean()) BadRequest("parse_special", "'parse_special' must be a boolean");
    parse_special = p->get<bool>();
  }
  if (auto p = body.find("with_pieces"); p != body.end()) {
    if (!p->is_boolean()) BadRequest("with_pieces", "'with_pieces' must be a boolean");
    with_pieces = p->get<bool>();
  }
  const auto& tok = engine->tokenizer();
  const std::vector<int32_t> ids = tok.Encode(it->get_ref<const std::string&>(), parse_special);
  json tokens = json::array();
  for (int32_t id : ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    // A piece that is part of a character is given as its bytes (llama-server does the same).
    const std::string_view bytes = tok.TokenBytes(id);
    json piece = std::string(bytes);
    if (!tokenizer::IsValidUtf8(bytes)) {
      piece = json::array();
      for (unsigned char c : bytes) piece.push_back(c);
    }
    tokens.push_back({{"id", id}, {"piece", piece}});
  }
  res.set_content(Dump({{"tokens", tokens}}), "application/json");
}

void Server::Impl::HandleDetokenize(const http::Request& req, http::Response& res) {
  const json body = ParseBody(req.body);
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array())
    BadRequest("tokens", "'tokens' must be an array of token ids");
  const auto& tok = engine->tokenizer();
  tokenizer::StreamDecoder d(tok);
  std::string text;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.n_vocab()) {
      BadRequest("tokens[" + std::to_string(i) + "]",
                 "token ids must be integers in [0, " + std::to_string(tok.n_vocab()) + ")");
    }
    text += d.Feed(static_cast<int32_t>(t.get<int64_t>()));
  }
  text += d.Flush();
  res.set_content(Dump({{"content", text}}), "application/json");
}

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Server::~Server() { Stop(); }

void Server::Run() {
  Impl& s = *impl_;
  s.created = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  s.CheckOptions();
  s.Setup();
  const int port = s.transport.Bind(s.options.host, s.options.port);
  if (port <= 0) {
    if (s.options.port == 0)
      Fail("cannot listen on {} (any port): is the address available here? (--host)",
           s.options.host);
    Fail(
        "cannot listen on {}:{}: the port is in use or the address is not available here; choose "
        "another --port or --host",
        s.options.host, s.options.port);
  }
  s.log.Info("listening on http://{}:{}", s.options.host, port);
  std::thread listener([&s] { s.transport.Run(); });
  try {
    s.Load();
  } catch (...) {
    s.transport.Stop();
    listener.join();
    throw;
  }
  s.ready.store(true);
  s.log.Info("model {} ready: {} slot{} x {} tokens, mode {}, http://{}:{}/v1", s.model_name,
             s.options.n_slots, s.options.n_slots == 1 ? "" : "s", s.n_ctx_slot,
             decode::ModeName(s.defaults.params.mode), s.options.host, port);
  listener.join();
  s.ready.store(false);
  s.scheduler.reset();  // cancels what is left
}

void Server::Stop() {
  if (!impl_) return;
  impl_->stopping.store(true);
  impl_->transport.Stop();
}

void Server::BeginDrain() {
  if (impl_) impl_->draining.store(true);
}

int64_t Server::InFlight() const { return impl_ ? impl_->in_flight.load() : 0; }

}  // namespace crossword::server
