// `crossword serve`: flag parsing (llama-server's names where they exist) and signal handling.
#include "server/server_commands.h"

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
#include "server/server.h"

namespace crossword::server {
namespace {

struct ServeFlags {
  ServerOptions o;
  std::string kv_type = "f16", log_level = "info", reasoning_format = "deepseek", kwargs;
  std::string chat_template, chat_template_file, api_key_file;
  std::string metrics_compat = "none";
  bool no_mmap = false, mlock = false, no_repack = false, list_devices = false;
  int reasoning_budget = -1;
  double drain_timeout = 20;  ///< seconds SIGTERM waits for requests in flight
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
  o.engine.map.use_mmap = !f.no_mmap;
  o.engine.map.lock = f.mlock;
  o.engine.repack = !f.no_repack;
  o.engine.logger = Logger(ParseLogLevel(f.log_level));
  if (f.kv_type == "f16" || f.kv_type == "F16") {
    o.kv_type = GgmlType::kF16;
  } else if (f.kv_type == "f32" || f.kv_type == "F32") {
    o.kv_type = GgmlType::kF32;
  } else {
    Fail("--kv-type must be f16 or f32 (got '{}')", f.kv_type);
  }
  try {
    o.reasoning_format = ParseReasoningFormat(f.reasoning_format, "--reasoning-format");
  } catch (const ApiError& e) {
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
  if (f.reasoning_budget == 0) o.chat_template_kwargs["enable_thinking"] = false;
  Check(o.port >= 0 && o.port <= 65535, "--port must be in [0, 65535] (got {})", o.port);
  Check(o.n_slots >= 1 && o.n_slots <= 256, "-np must be in [1, 256] (got {})", o.n_slots);
  Check(o.max_body_bytes >= 1024, "--max-body-size must be at least 1024 bytes");
  Check(o.header_timeout_s > 0 && o.header_timeout_s <= 3600,
        "--header-timeout must be in (0, 3600] seconds (got {})", o.header_timeout_s);
  Check(o.request_timeout_s > 0 && o.request_timeout_s <= 86400,
        "--request-timeout must be in (0, 86400] seconds (got {})", o.request_timeout_s);
  o.metrics_compat = ParseMetricsCompat(f.metrics_compat);
  Check(f.drain_timeout >= 0 && f.drain_timeout <= 86400,
        "--drain-timeout must be in [0, 86400] seconds (got {})", f.drain_timeout);

  // SIGINT/SIGTERM are taken by one thread (sigtimedwait); every other thread, created after this
  // point, inherits the blocked mask. SIGINT stops at once (running requests are cancelled).
  // SIGTERM drains: no new generations, those in flight finish within --drain-timeout, then the
  // server stops (what still runs is cancelled); a second signal stops at once.
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  Server server(o);
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

void RegisterServerCommands(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd =
      app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/chat/completions, ...)");
  ServerOptions& o = f->o;
  cmd->add_option("-m,--model", o.engine.model_path,
                  "GGUF model file (default: the embedded tiny model)");
  cmd->add_option("--host", o.host, "address to bind (0.0.0.0 exposes the server to the network)")
      ->capture_default_str();
  cmd->add_option("--port", o.port, "port (0: any free port, printed at start)")
      ->capture_default_str();
  // llama-server spells it -np, which CLI11 cannot declare (one-letter short names only): it is
  // taken from the extras in the callback.
  cmd->add_option("--parallel", o.n_slots,
                  "slots: requests decoded at once (more wait in a queue); also -np N")
      ->capture_default_str();
  cmd->allow_extras();
  cmd->add_option("-c,--ctx-size", o.n_ctx,
                  "total context over all slots, split evenly (0: 4096 per slot)")
      ->capture_default_str();
  cmd->add_option("-a,--alias", o.alias, "model name in responses and /v1/models");
  cmd->add_option_function<std::string>(
      "--api-key",
      [&o](const std::string& v) {
        std::stringstream keys(v);
        for (std::string k; std::getline(keys, k, ',');) {
          if (!k.empty()) o.api_keys.push_back(k);
        }
      },
      "require 'Authorization: Bearer KEY' on every route but /health (several: comma-separated)");
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
  cmd->add_option("-t,--threads", o.engine.threads, "compute threads (default: all cores)");
  cmd->add_option("-b,--batch-size", o.batch_tokens, "tokens per forward pass over all slots")
      ->capture_default_str();
  cmd->add_option("--threads-http", o.http_threads,
                  "HTTP worker threads (0: max(16, 4 x slots + 8))");
  cmd->add_option("--kv-type", f->kv_type, "KV cache type: f16 or f32")->capture_default_str();
  cmd->add_flag("--no-mmap", f->no_mmap, "read the model into RAM instead of mapping it");
  cmd->add_flag("--mlock", f->mlock, "pin the model in RAM");
  cmd->add_flag(
      "--no-repack", f->no_repack,
      "keep no tile-layout copy of Q8_0/Q4_0 weights (multi-row passes repack on the fly)");
  cmd->add_option("--log-level", f->log_level, "debug, info, warn, error or silent")
      ->capture_default_str();
  cmd->add_option("--device", o.engine.device, backends::kDeviceFlagHelp)->capture_default_str();
  cmd->add_option("--n-gpu-layers,--gpu-layers", o.engine.n_gpu_layers,
                  backends::kGpuLayersFlagHelp)
      ->capture_default_str();
  cmd->add_flag("--list-devices", f->list_devices, backends::kListDevicesFlagHelp);
  cmd->add_flag("--log-prompts", o.log_prompts,
                "log prompt and answer text (default: sizes and timings only)");
  cmd->add_option("--max-body-size", o.max_body_bytes,
                  "largest request body in bytes, any encoding (larger: 413)")
      ->capture_default_str();
  cmd->add_option("--header-timeout", o.header_timeout_s,
                  "seconds a request's header may take to arrive (then 408 and close)")
      ->capture_default_str();
  cmd->add_option("--request-timeout", o.request_timeout_s,
                  "seconds a whole request (header and body) may take to arrive (then 408)")
      ->capture_default_str();
  cmd->add_option("--max-queue", o.max_queue, "requests waiting for a slot beyond this get 503")
      ->capture_default_str();
  cmd->add_option("--mode", o.decoding.mode, "default decoding mode: ar, diffusion or spec")
      ->capture_default_str();
  cmd->add_option("--block-size", o.decoding.block_size,
                  "default diffusion block / spec draft length (0: the model's)");
  cmd->add_option("--threshold", o.decoding.threshold,
                  "default diffusion commit threshold (0: the model's)");
  cmd->add_option(
         "--draft-max", o.decoding.draft_max,
         "default spec drafts per round at most, [0, 255] (0: block size - 1; default 15), or auto")
      ->transform([](std::string s) {
        // kDraftAuto is -1 inside: only the word `auto` may ask for it, never a number.
        if (s == "auto") return std::to_string(decode::kDraftAuto);
        if (!s.empty() && s[0] == '-') {
          throw CLI::ValidationError("--draft-max",
                                     "draft-max must be in [0, 255] or auto (got " + s + ")");
        }
        return s;
      });
  cmd->add_option(
      "--draft-p-min", o.decoding.draft_p_min,
      "default spec verify cut: leading drafts with probability >= this, [0, 1] (default 0: all)");
  cmd->add_option("--max-block-size", o.max_block_size,
                  "largest block a request may ask for (0: max(32, default))");
  cmd->add_flag("--no-dllm-biases", o.no_dllm_biases,
                "switch off Clover's long-generation length/think-end biases");
  cmd->add_option("--reasoning-format", f->reasoning_format,
                  "deepseek: reasoning in reasoning_content; none: left in content")
      ->capture_default_str();
  cmd->add_option("--reasoning-budget", f->reasoning_budget,
                  "-1: think freely; 0: thinking off by default")
      ->capture_default_str();
  cmd->add_option("--chat-template-kwargs", f->kwargs,
                  "default chat_template_kwargs as JSON, e.g. '{\"enable_thinking\": false}'");
  cmd->add_option("--chat-template", f->chat_template,
                  "Jinja chat template text used instead of the model's");
  cmd->add_option("--chat-template-file", f->chat_template_file,
                  "file with a Jinja chat template used instead of the model's");
  cmd->add_option("--ctx-checkpoints", o.max_checkpoints,
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
  cmd->callback([f, cmd] {
    const std::vector<std::string> extra = cmd->remaining();
    for (size_t i = 0; i < extra.size(); ++i) {
      std::string value;
      if (extra[i] == "-np" && i + 1 < extra.size()) {
        value = extra[++i];
      } else if (extra[i].rfind("-np=", 0) == 0) {
        value = extra[i].substr(4);
      } else {
        Fail("serve: unknown argument '{}' (see crossword serve --help)", extra[i]);
      }
      try {
        size_t used = 0;
        f->o.n_slots = std::stoi(value, &used);
        if (used != value.size()) throw std::invalid_argument(value);
      } catch (const std::exception&) {
        Fail("-np needs a number of slots (got '{}')", value);
      }
    }
    if (f->list_devices) {
      std::fputs(backends::DescribeDevices(Logger(ParseLogLevel(f->log_level))).c_str(), stdout);
      return;
    }
    Serve(*f);
  });
}

}  // namespace crossword::server
