// `crossword serve`: its flags (the registry's, cli/common.h, and the server's own, with
// llama-server's names and meanings) and signal handling.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backends/registry.h"
#include "base/error.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/llama_flags.h"
#include "server/server.h"

namespace crossword::cli {
namespace {

using server::ServerOptions;

struct ServeFlags {
  ServerOptions o;
  ModelFlags model;
  DecodeFlags decode;
  std::shared_ptr<FlagNotes> notes = std::make_shared<FlagNotes>();
  std::string reasoning_format = "deepseek", kwargs;
  std::string chat_template, chat_template_file, api_key_file;
  std::string metrics_compat = "none";
  int reasoning_budget = -1;
  std::string reasoning = "auto";  ///< --reasoning on|off|auto
  double drain_timeout = 20;       ///< seconds SIGTERM waits for requests in flight
};

std::string ReadTextFile(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail("{}: cannot read '{}'", flag, path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Serve(ServeFlags& f) {
  ServerOptions o = f.o;
  const engine::EngineOptions eo = f.model.ToEngineOptions();
  o.engine.model_path = eo.model_path;
  o.engine.map = eo.map;
  o.engine.repack = eo.repack;
  o.engine.threads = eo.threads;
  o.engine.device = eo.device;
  o.engine.n_gpu_layers = eo.n_gpu_layers;
  o.engine.logger = eo.logger;
  o.n_ctx = f.model.n_ctx;
  if (f.model.batch) o.batch_tokens = *f.model.batch;
  o.kv_type = f.model.KvType(f.notes.get());
  f.model.AddNotes(*f.notes);
  f.decode.CheckSampling();
  o.decoding = f.decode.decoding;
  // The server's spec rounds pick their draft length (`--draft-max auto`, docs/decoding.md)
  // unless --draft-max says otherwise: it never drafts where drafting does not pay on the
  // device and model at hand (issue 18), and the server does not fuse passes, which need fixed
  // draft lengths. `run` keeps 15 (it can fuse).
  if (!o.decoding.draft_max) o.decoding.draft_max = decode::kDraftAuto;
  o.n_predict = f.decode.n_predict;
  o.no_dllm_biases = f.decode.no_dllm_biases;
  try {
    o.reasoning_format = server::ParseReasoningFormat(f.reasoning_format, "--reasoning-format");
  } catch (const server::ApiError& e) {
    Fail("{}", e.what());
  }
  if (!f.kwargs.empty()) {
    try {
      o.chat_template_kwargs = nlohmann::ordered_json::parse(f.kwargs);
    } catch (const nlohmann::json::parse_error& e) {
      Fail("--chat-template-kwargs is not valid JSON: {}", e.what());
    }
    Check(o.chat_template_kwargs.is_object(),
          "--chat-template-kwargs must be a JSON object, e.g. "
          "'{{\"enable_thinking\": false}}'");
  }
  Check(f.chat_template.empty() || f.chat_template_file.empty(),
        "give one of --chat-template and --chat-template-file");
  if (!f.chat_template_file.empty()) {
    o.engine.chat_template = ReadTextFile(f.chat_template_file, "--chat-template-file");
  } else if (!f.chat_template.empty()) {
    // llama.cpp also takes built-in template names (chatml, llama3, ...); crossword has none.
    Check(f.chat_template.find("{%") != std::string::npos ||
              f.chat_template.find("{{") != std::string::npos,
          "--chat-template takes Jinja template text (built-in template names such as '{}' are "
          "not supported; use --chat-template-file)",
          f.chat_template);
    o.engine.chat_template = f.chat_template;
  }
  if (!f.api_key_file.empty()) {
    std::istringstream lines(ReadTextFile(f.api_key_file, "--api-key-file"));
    for (std::string line; std::getline(lines, line);) {
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back())))
        line.pop_back();
      if (!line.empty()) o.api_keys.push_back(line);
    }
    Check(!o.api_keys.empty(), "--api-key-file '{}' holds no key", f.api_key_file);
  }
  Check(f.reasoning_budget == -1 || f.reasoning_budget == 0,
        "--reasoning-budget supports -1 (unrestricted) or 0 (thinking off), got {}",
        f.reasoning_budget);
  if (f.reasoning_budget == 0 || f.reasoning == "off")
    o.chat_template_kwargs["enable_thinking"] = false;
  Check(o.port >= 0 && o.port <= 65535, "--port must be in [0, 65535] (got {})", o.port);
  Check(o.n_slots >= 1 && o.n_slots <= 256, "-np must be in [1, 256] (got {})", o.n_slots);
  Check(o.max_body_bytes >= 1024, "--max-body-size must be at least 1024 bytes");
  Check(o.header_timeout_s > 0 && o.header_timeout_s <= 3600,
        "--header-timeout must be in (0, 3600] seconds (got {})", o.header_timeout_s);
  Check(o.request_timeout_s > 0 && o.request_timeout_s <= 86400,
        "--request-timeout must be in (0, 86400] seconds (got {})", o.request_timeout_s);
  o.metrics_compat = server::ParseMetricsCompat(f.metrics_compat);
  Check(f.drain_timeout >= 0 && f.drain_timeout <= 86400,
        "--drain-timeout must be in [0, 86400] seconds (got {})", f.drain_timeout);

  // SIGINT/SIGTERM are taken by one thread (sigtimedwait); every other thread, created after this
  // point, inherits the blocked mask. SIGINT stops at once (running requests are cancelled).
  // SIGTERM drains: no new generations, those in flight finish within --drain-timeout, then the
  // server stops (what still runs is cancelled); a second signal stops at once.
  f.notes->Print(o.engine.logger);
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  server::Server server(o);
  std::atomic<bool> finished{false};
  const double drain_timeout = f.drain_timeout;
  std::thread watcher([&] {
    using Clock = std::chrono::steady_clock;
    const timespec tick{0, 20 * 1000 * 1000};
    bool draining = false;
    Clock::time_point t0, deadline;
    while (!finished.load()) {
      const int sig = sigtimedwait(&set, nullptr, &tick);
      if (sig == SIGINT || (sig == SIGTERM && (draining || drain_timeout <= 0))) {
        o.engine.logger.Info("signal {}: shutting down now ({} requests in flight cancelled)", sig,
                             server.InFlight());
        server.Stop();
        return;
      }
      if (sig == SIGTERM) {
        draining = true;
        server.BeginDrain();
        t0 = Clock::now();
        deadline = t0 + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(drain_timeout));
        o.engine.logger.Info("SIGTERM: draining {} requests in flight (at most {} s)",
                             server.InFlight(), drain_timeout);
      }
      if (!draining) continue;
      const int64_t left = server.InFlight();
      if (left == 0 || Clock::now() >= deadline) {
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        if (left == 0) {
          o.engine.logger.Info("drained in {:.2f} s: shutting down", s);
        } else {
          o.engine.logger.Info("drain bound reached after {:.2f} s: cancelling {} requests", s,
                               left);
        }
        server.Stop();
        return;
      }
    }
  });
  try {
    server.Run();
  } catch (...) {
    finished.store(true);
    watcher.join();
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  finished.store(true);
  watcher.join();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace

void RegisterServeCommand(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd =
      app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/chat/completions, ...)");
  ServerOptions& o = f->o;
  f->model.n_ctx = 0;  // 4096 per slot
  f->model.Add(cmd, kServe, /*model_required=*/false);
  f->decode.Add(cmd, kServe);
  AddNoEffectFlags(cmd, kServe, f->notes);
  cmd->add_option("--host", o.host, "address to bind (0.0.0.0 exposes the server to the network)")
      ->capture_default_str()
      ->envname("LLAMA_ARG_HOST");
  cmd->add_option("--port", o.port, "port (0: any free port, printed at start)")
      ->capture_default_str()
      ->envname("LLAMA_ARG_PORT");
  cmd->add_option("--parallel", o.n_slots,
                  "slots: requests decoded at once (more wait in a queue); also -np N")
      ->capture_default_str()
      ->envname("LLAMA_ARG_N_PARALLEL");
  cmd->add_option("-a,--alias", o.alias, "model name in responses and /v1/models")
      ->envname("LLAMA_ARG_ALIAS");
  cmd->add_option_function<std::string>(
         "--api-key",
         [&o](const std::string& v) {
           std::stringstream keys(v);
           for (std::string k; std::getline(keys, k, ',');) {
             if (!k.empty()) o.api_keys.push_back(k);
           }
         },
         "require 'Authorization: Bearer KEY' on every route but /health (several: "
         "comma-separated)")
      ->envname("LLAMA_API_KEY");
  cmd->add_option("--api-key-file", f->api_key_file, "file of API keys, one a line");
  cmd->add_option("--cors-origins", o.cors.origins,
                  "origins allowed by CORS, comma-separated; '*': any; 'localhost': a localhost "
                  "origin is reflected")
      ->capture_default_str();
  cmd->add_option("--cors-methods", o.cors.methods, "methods a CORS preflight allows")
      ->capture_default_str();
  cmd->add_option("--cors-headers", o.cors.headers, "headers a CORS preflight allows")
      ->capture_default_str();
  cmd->add_flag("--cors-credentials,!--no-cors-credentials", o.cors.credentials,
                "allow credentials in CORS requests")
      ->capture_default_str();
  cmd->add_option("--threads-http", o.http_threads,
                  "HTTP worker threads (0: max(16, 4 x slots + 8))")
      ->envname("LLAMA_ARG_THREADS_HTTP");
  cmd->add_flag("--log-prompts", o.log_prompts,
                "log prompt and answer text (default: sizes and timings only)");
  cmd->add_option("--max-body-size", o.max_body_bytes,
                  "largest request body in bytes, any encoding (larger: 413)")
      ->capture_default_str();
  cmd->add_option("--header-timeout", o.header_timeout_s,
                  "seconds a request's header may take to arrive (then 408 and close)")
      ->capture_default_str();
  cmd->add_option("--request-timeout,--timeout", o.request_timeout_s,
                  "seconds a whole request (header and body) may take to arrive (then 408); "
                  "llama-server's --timeout / -to")
      ->capture_default_str();
  cmd->add_option("--max-queue", o.max_queue, "requests waiting for a slot beyond this get 503")
      ->capture_default_str();
  cmd->add_option("--max-block-size", o.max_block_size,
                  "largest block a request may ask for (0: max(32, default))");
  cmd->add_option("--reasoning-format", f->reasoning_format,
                  "deepseek: reasoning in reasoning_content; none: left in content")
      ->capture_default_str()
      ->envname("LLAMA_ARG_THINK");
  cmd->add_option("--reasoning", f->reasoning,
                  "llama-server's newer switch: on, off (thinking off by default) or auto")
      ->check(CLI::IsMember({"on", "off", "auto"}));
  cmd->add_option("--reasoning-budget", f->reasoning_budget,
                  "-1: think freely; 0: thinking off by default")
      ->capture_default_str()
      ->envname("LLAMA_ARG_THINK_BUDGET");
  cmd->add_option("--chat-template-kwargs", f->kwargs,
                  "default chat_template_kwargs as JSON, e.g. '{\"enable_thinking\": false}'");
  cmd->add_option("--chat-template", f->chat_template,
                  "Jinja chat template text used instead of the model's")
      ->envname("LLAMA_ARG_CHAT_TEMPLATE");
  cmd->add_option("--chat-template-file", f->chat_template_file,
                  "file with a Jinja chat template used instead of the model's")
      ->envname("LLAMA_ARG_CHAT_TEMPLATE_FILE");
  cmd->add_option("--ctx-checkpoints,--swa-checkpoints", o.max_checkpoints,
                  "prompt-cache GDN checkpoints kept per slot")
      ->capture_default_str();
  cmd->add_option("--ctx-checkpoint-interval", o.checkpoint_interval,
                  "prompt tokens between checkpoints")
      ->capture_default_str();
  cmd->add_option(
         "--metrics-compat", f->metrics_compat,
         "none, or vllm: /metrics also shows vLLM's names (vllm:num_requests_waiting, ...)")
      ->capture_default_str();
  cmd->add_option(
         "--drain-timeout", f->drain_timeout,
         "seconds SIGTERM waits for requests in flight before cancelling them (0: at once)")
      ->capture_default_str();
  cmd->add_flag("--no-slots", o.no_slots, "disable GET /slots (per-slot state)");
  cmd->add_flag("--no-webui", o.no_webui, "disable the chat page at /");
  cmd->callback([f] {
    if (!f->model.ListDevicesIfAsked()) Serve(*f);
  });
}

}  // namespace crossword::cli
