// `crossword bench serve`: steps (input length x concurrency x request rate), each with warm-up
// requests and measured runs under the load guard, against a server at --url or one started per
// step by --spawn; a vLLM-style report and a JSON result with the run's contract.
#include "tools/serve_bench_command.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "tools/load_guard.h"
#include "tools/serve_bench.h"
#include "tools/serve_bench_client.h"

namespace crossword::tools {
namespace {

using json = nlohmann::ordered_json;
using namespace servebench;  // NOLINT(build/namespaces): this file is the tool's front end

struct Flags {
  std::string url, spawn, spawn_log, endpoint = "/v1/completions", model, api_key;
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
  std::string extra_body, model_file;
  std::string known_answer = "What is the capital of France?=>Paris";
  bool no_known_answer = false;
  double guard_max_other = 0.5;
  int guard_retries = 2;
  double spawn_timeout = 600, timeout = 600;
};

std::string ReadFirstLine(const std::string& path, const std::string& prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

std::string Trimmed(std::string s) {
  const size_t a = s.find_first_not_of(" \t:");
  const size_t b = s.find_last_not_of(" \t\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// VmHWM / VmRSS of a process in MiB (-1 when gone).
double StatusMiB(pid_t pid, const char* key) {
  const std::string line = ReadFirstLine("/proc/" + std::to_string(pid) + "/status", key);
  if (line.empty()) return -1;
  return std::strtod(line.c_str() + std::strlen(key), nullptr) / 1024.0;
}

json MachineJson() {
  utsname u{};
  uname(&u);
  return {{"cpu", Trimmed(ReadFirstLine("/proc/cpuinfo", "model name").substr(10))},
          {"cpus", std::thread::hardware_concurrency()},
          {"mem_total", Trimmed(ReadFirstLine("/proc/meminfo", "MemTotal").substr(9))},
          {"kernel", std::string(u.sysname) + " " + u.release},
          {"hostname", u.nodename}};
}

std::string CommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out;
  for (char c : raw) out += c == '\0' ? ' ' : c;
  return Trimmed(out);
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A server started by --spawn: its own process group, stopped (SIGTERM, then SIGKILL) on scope
// exit.
class Spawned {
 public:
  Spawned(const std::string& command_template, const std::string& log_path, double timeout_s,
          Target& target) {
    const int port = FreePort();
    std::string cmd = command_template;
    const size_t at = cmd.find("{port}");
    Check(at != std::string::npos, "--spawn: the command must contain {{port}} (got '{}')", cmd);
    for (size_t p = at; p != std::string::npos; p = cmd.find("{port}"))
      cmd.replace(p, 6, std::to_string(port));
    command_ = cmd;
    log_ = log_path;
    pid_ = fork();
    Check(pid_ >= 0, "--spawn: fork failed");
    if (pid_ == 0) {
      setpgid(0, 0);
      FILE* f = std::fopen(log_.c_str(), "a");
      if (f) {
        dup2(fileno(f), 1);
        dup2(fileno(f), 2);
      }
      const std::string exec_cmd = "exec " + cmd;  // the shell becomes the server: one pid
      execl("/bin/sh", "sh", "-c", exec_cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    setpgid(pid_, pid_);
    target.host = "127.0.0.1";
    target.port = port;
    try {
      WaitReady(target, timeout_s);
    } catch (...) {
      Stop();  // the constructor did not finish: no destructor will run
      throw;
    }
  }
  ~Spawned() { Stop(); }
  Spawned(const Spawned&) = delete;
  Spawned& operator=(const Spawned&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& command() const { return command_; }
  double load_s() const { return load_s_; }

 private:
  void WaitReady(const Target& target, double timeout_s) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        Fail("--spawn: the server exited before it was ready (status {}); its log: {}", status,
             log_);
      }
      if (HttpGet(target, "/health", nullptr, 2) == 200) break;
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      Check(waited < timeout_s, "--spawn: the server was not ready after {} s; its log: {}",
            timeout_s, log_);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    load_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  void Stop() {
    if (pid_ <= 0) return;
    kill(-pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  static int FreePort() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    Check(fd >= 0, "--spawn: socket() failed");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
    close(fd);
    Check(ok, "--spawn: cannot find a free port");
    return ntohs(a.sin_port);
  }

  pid_t pid_ = -1;
  std::string command_, log_;
  double load_s_ = 0;
};

std::vector<double> ParseList(const std::string& text) {
  std::vector<double> out;
  std::string s = text;
  std::replace(s.begin(), s.end(), ',', ' ');
  std::istringstream in(s);
  std::string item;
  while (in >> item) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    Check(*end == '\0', "'{}' is not a number", item);
    out.push_back(v);
  }
  return out;
}

double ParseRate(const std::string& s) {
  if (s == "inf") return std::numeric_limits<double>::infinity();
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  Check(*end == '\0' && v > 0, "--request-rate: '{}' is not a rate > 0 or inf", s);
  return v;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return Percentile(v, 50);
}

// The headline figures of a step: median over its runs, with the smallest and largest.
json StepSummary(const std::vector<json>& runs) {
  json median = json::object(), spread = json::object();
  for (const char* key :
       {"request_throughput", "output_throughput", "total_token_throughput", "request_goodput",
        "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "median_itl_ms",
        "p99_itl_ms", "median_e2el_ms", "p99_e2el_ms", "tokens_per_chunk", "tokens_per_pass"}) {
    std::vector<double> v;
    for (const json& r : runs) {
      if (r.contains(key) && r[key].is_number()) v.push_back(r[key].get<double>());
    }
    if (v.empty()) continue;
    median[key] = Median(v);
    spread[key] = {*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
  }
  return {{"median", median}, {"spread", spread}};
}

void PrintRun(const Metrics& m, const std::vector<double>& pcts, const std::string& title) {
  auto row = [](const std::string& k, const std::string& v) {
    std::printf("%-40s %s\n", k.c_str(), v.c_str());
  };
  auto f2 = [](double v) { return fmt::format("{:.2f}", v); };
  std::printf("%s\n%s\n", fmt::format("{:=^50}", " Serving Benchmark Result ").c_str(),
              title.c_str());
  row("Successful requests:", std::to_string(m.completed));
  row("Failed requests:", std::to_string(m.failed));
  row("Maximum request concurrency:", std::to_string(m.peak_concurrency));
  row("Benchmark duration (s):", f2(m.duration_s));
  row("Total input tokens:", std::to_string(m.total_input));
  row("Total generated tokens:", std::to_string(m.total_output));
  row("Request throughput (req/s):", f2(m.request_throughput));
  if (m.request_goodput >= 0) row("Request goodput (req/s):", f2(m.request_goodput));
  row("Output token throughput (tok/s):", f2(m.output_throughput));
  row("Total token throughput (tok/s):", f2(m.total_token_throughput));
  row("Tokens per streamed chunk:", f2(m.tokens_per_chunk));
  if (m.tokens_per_pass >= 0) row("Tokens per forward pass (server):", f2(m.tokens_per_pass));
  auto dist = [&](const char* head, const char* name, const Distribution& d) {
    std::printf("%s\n", fmt::format("{:-^50}", head).c_str());
    row(fmt::format("Mean {} (ms):", name), f2(d.mean));
    row(fmt::format("Median {} (ms):", name), f2(d.median));
    for (double p : pcts) row(fmt::format("P{} {} (ms):", p, name), f2(d.percentiles.at(p)));
  };
  dist("Time to First Token", "TTFT", m.ttft_ms);
  dist("Time per Output Token (excl. 1st token)", "TPOT", m.tpot_ms);
  dist("Inter-token Latency (per chunk)", "ITL", m.itl_ms);
  dist("End-to-end Latency", "E2EL", m.e2el_ms);
  std::printf("%s\n", std::string(50, '=').c_str());
  for (const std::string& e : m.errors) std::printf("error: %s\n", e.c_str());
  std::fflush(stdout);
}

void Progress(const std::string& what, int64_t done, int64_t total) {
  if (!isatty(2)) return;
  const int width = 30;
  const auto filled = static_cast<int>(width * done / std::max<int64_t>(total, 1));
  std::fprintf(stderr, "\r%s [%s%s] %lld/%lld", what.c_str(), std::string(filled, '#').c_str(),
               std::string(width - filled, ' ').c_str(), static_cast<long long>(done),
               static_cast<long long>(total));
  if (done == total) std::fprintf(stderr, "\n");
}

// The known-answer guard: a model that answers a known question wrong (a broken build, a
// random-weight file) still has a tokens/s figure; refuse to print it unless overridden.
json CheckKnownAnswer(const Target& target, const Flags& f) {
  if (f.no_known_answer) {
    return {{"checked", false},
            {"note", "--no-known-answer: speeds of a model whose answers were not checked"}};
  }
  const size_t sep = f.known_answer.find("=>");
  Check(sep != std::string::npos && sep > 0 && sep + 2 < f.known_answer.size(),
        "--known-answer: '{}' is not QUESTION=>ANSWER", f.known_answer);
  const std::string question = f.known_answer.substr(0, sep);
  const std::string expected = f.known_answer.substr(sep + 2);
  std::string answer;
  try {
    answer = AskChat(target, question, 64);
  } catch (const Error& e) {
    Fail("known-answer guard: asked \"{}\" and got no answer ({}); --no-known-answer overrides",
         question, e.what());
  }
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const bool ok = lower(answer).find(lower(expected)) != std::string::npos;
  Check(ok,
        "known-answer guard: asked \"{}\", expected \"{}\" in the answer, got \"{}\"; no speeds "
        "for a model that answers wrong (--no-known-answer overrides, e.g. for random-weight "
        "files, and says so in the result)",
        question, expected, answer.substr(0, 200));
  return {{"checked", true}, {"question", question}, {"expected", expected}, {"answer", answer}};
}

void Run(const Flags& f) {
  Check(f.url.empty() != f.spawn.empty(), "bench serve: give exactly one of --url and --spawn");
  Check(f.warmup >= 0 && f.runs >= 1, "--warmup must be >= 0 and --runs >= 1");
  const std::vector<double> pcts = ParseList(f.percentiles);
  for (double p : pcts) Check(p >= 0 && p <= 100, "--percentiles: {} is not in [0, 100]", p);
  const Slo slo = ParseSlo(f.goodput);
  json extra = json::object();
  if (!f.extra_body.empty()) {
    extra = json::parse(f.extra_body, nullptr, false);
    Check(extra.is_object(), "--extra-body must be a JSON object");
  }
  std::vector<double> rates;
  for (const std::string& r : f.rates) rates.push_back(ParseRate(r));
  for (int c : f.concurrencies) Check(c >= 0, "--max-concurrency must be >= 0 (0: unlimited)");

  Target target = f.spawn.empty() ? ParseUrl(f.url) : Target{};
  target.endpoint = f.endpoint;
  target.model = f.model;
  target.api_key = f.api_key;
  target.timeout_s = f.timeout;
  const std::string spawn_log = f.spawn_log.empty()
                                    ? (std::filesystem::temp_directory_path() /
                                       fmt::format("crossword-bench-serve-{}.log", getpid()))
                                          .string()
                                    : f.spawn_log;

  json result = {{"tool", "crossword bench serve"}, {"version", "crossword 0.1.0"}};
  json contract = {{"command", CommandLine()},
                   {"started_utc", UtcNow()},
                   {"url", f.url},
                   {"spawn", f.spawn},
                   {"endpoint", f.endpoint},
                   {"dataset", f.dataset},
                   {"known_answer_check", !f.no_known_answer},
                   {"machine", MachineJson()},
                   {"loadavg_start", LoadAverage1("/proc")}};
  if (!f.model_file.empty()) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(f.model_file, ec);
    Check(!ec, "--model-file: cannot read {}", f.model_file);
    std::string sum;
    if (FILE* p = popen(("sha256sum '" + f.model_file + "' 2>/dev/null").c_str(), "r")) {
      char buf[128] = {0};
      if (std::fgets(buf, sizeof(buf), p)) sum = std::string(buf).substr(0, 64);
      pclose(p);
    }
    contract["model_file"] = {{"path", f.model_file}, {"bytes", size}, {"sha256", sum}};
  }
  result["config"] = {{"input_len", f.input_lens},
                      {"output_len", f.output_len},
                      {"range_ratio", f.range_ratio},
                      {"num_prompts", f.num_prompts},
                      {"request_rate", f.rates},
                      {"burstiness", f.burstiness},
                      {"max_concurrency", f.concurrencies},
                      {"warmup", f.warmup},
                      {"runs", f.runs},
                      {"seed", f.seed},
                      {"goodput", f.goodput},
                      {"percentiles", pcts},
                      {"extra_body", extra},
                      {"label", f.label},
                      {"guard_max_other_cores", f.guard_max_other},
                      {"guard_retries", f.guard_retries}};

  std::vector<int32_t> corpus;  // tokenized once, by the first server (same tokenizer each step)
  const int64_t max_len = *std::max_element(f.input_lens.begin(), f.input_lens.end());
  json steps = json::array();
  for (int64_t input_len : f.input_lens) {
    for (int conc : f.concurrencies) {
      for (size_t ri = 0; ri < rates.size(); ++ri) {
        std::unique_ptr<Spawned> server;
        if (!f.spawn.empty())
          server = std::make_unique<Spawned>(f.spawn, spawn_log, f.spawn_timeout, target);
        json step = {{"input_len", input_len},
                     {"output_len", f.output_len},
                     {"max_concurrency", conc},
                     {"request_rate", f.rates[ri]},
                     {"num_prompts", f.num_prompts}};
        if (server) {
          step["server_command"] = server->command();
          step["server_ready_s"] = server->load_s();
        }
        step["known_answer"] = CheckKnownAnswer(target, f);
        if (corpus.empty()) {
          // Enough text for every prompt of the longest length (~4 characters per token).
          const size_t chars =
              static_cast<size_t>(std::min<int64_t>(64 << 20, max_len * f.num_prompts * 6 + 4096));
          const std::string text = DatasetText(f.dataset, chars, f.seed);
          for (size_t at = 0; at < text.size();) {
            // Pieces of ~32 KB cut at a space: bounded request bodies.
            size_t end = std::min(text.size(), at + 32768);
            if (end < text.size()) {
              const size_t sp = text.rfind(' ', end);
              if (sp != std::string::npos && sp > at) end = sp;
            }
            const std::vector<int32_t> ids = Tokenize(target, text.substr(at, end - at));
            corpus.insert(corpus.end(), ids.begin(), ids.end());
            at = end;
          }
        }
        std::vector<RequestSpec> requests =
            BuildRequests(corpus, {f.num_prompts, input_len, f.output_len, f.range_ratio, f.seed});
        if (target.Chat()) {
          for (RequestSpec& r : requests) r.prompt_text = Detokenize(target, r.prompt_ids);
        }
        pid_t server_pid = server ? server->pid() : FindListeningPid("/proc", target.port);
        std::vector<pid_t> watched = {getpid()};
        if (server_pid > 0) watched.push_back(server_pid);
        LoadGuard guard("/proc", watched, server_pid > 0 ? f.guard_max_other : -1, f.guard_retries);
        step["server_pid_found"] = server_pid > 0;
        const std::string title =
            fmt::format("input {} output {} concurrency {} rate {}", input_len, f.output_len,
                        conc == 0 ? std::string("unlimited") : std::to_string(conc), f.rates[ri]);
        for (int w = 0; w < f.warmup; ++w) {
          const RequestRecord r = SendRequest(
              target, requests[static_cast<size_t>(w) % requests.size()], extra, Clock::now());
          Check(r.ok, "warm-up request failed: {}", r.error);
        }
        std::vector<json> runs;
        for (int run = 0; run < f.runs; ++run) {
          json attempts = json::array();
          for (int attempt = 0;; ++attempt) {
            LoadOptions load;
            load.request_rate = rates[ri];
            load.burstiness = f.burstiness;
            load.max_concurrency = conc;
            load.seed = f.seed + static_cast<uint64_t>(run);
            load.progress = [&](int64_t d, int64_t n) {
              Progress(fmt::format("{} run {}", title, run + 1), d, n);
            };
            guard.Begin();
            const RunResult rr = RunLoad(target, requests, extra, load);
            const GuardSample g = guard.End();
            attempts.push_back(
                {{"other_cores", g.other_cores}, {"loadavg", g.loadavg}, {"busy", g.busy}});
            if (guard.ShouldRepeat(g, attempt)) {
              std::fprintf(stderr,
                           "bench serve: other processes used %.2f cores during the run (limit "
                           "%.2f): repeating it\n",
                           g.other_cores, f.guard_max_other);
              continue;
            }
            const Metrics m = ComputeMetrics(rr.records, rr.duration_s, slo, pcts);
            if (f.output == "md") PrintRun(m, pcts, fmt::format("{} run {}", title, run + 1));
            json mj = MetricsJson(m);
            mj["guard"] = attempts;
            runs.push_back(std::move(mj));
            break;
          }
        }
        step["runs"] = runs;
        const json summary = StepSummary(runs);
        step["median"] = summary["median"];
        step["spread"] = summary["spread"];
        if (server_pid > 0) {
          // Peak resident memory of the server: since this step's start with --spawn, since the
          // server's own start with --url.
          step["server_peak_rss_mib"] = StatusMiB(server_pid, "VmHWM:");
          step["server_rss_mib"] = StatusMiB(server_pid, "VmRSS:");
        }
        steps.push_back(std::move(step));
      }
    }
  }
  contract["loadavg_end"] = LoadAverage1("/proc");
  contract["finished_utc"] = UtcNow();
  result["contract"] = contract;
  result["steps"] = steps;
  if (!f.result_file.empty()) {
    std::ofstream out(f.result_file);
    Check(out.good(), "--result-file: cannot write {}", f.result_file);
    out << result.dump(2) << "\n";
  }
  if (f.output == "json") std::printf("%s\n", result.dump(2).c_str());
}

}  // namespace

void RegisterBenchServeCommand(CLI::App& bench) {
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = bench.add_subcommand(
      "serve",
      "benchmark an OpenAI-compatible server the way vLLM's benchmark_serving does (TTFT, TPOT, "
      "ITL, E2EL, throughput, goodput) under a request rate and concurrency; see docs/bench.md");
  auto* url = cmd->add_option("--url", f->url, "server to measure, e.g. http://127.0.0.1:8080");
  cmd->add_option("--spawn", f->spawn,
                  "start this server command per step instead (must contain {port}); its peak "
                  "resident memory is recorded")
      ->excludes(url);
  cmd->add_option("--spawn-log", f->spawn_log, "where the spawned server's output goes");
  cmd->add_option("--spawn-timeout", f->spawn_timeout, "seconds to wait for /health")
      ->capture_default_str();
  cmd->add_option("--endpoint", f->endpoint,
                  "/v1/completions (token-id prompts) or "
                  "/v1/chat/completions")
      ->check(CLI::IsMember({"/v1/completions", "/v1/chat/completions"}))
      ->capture_default_str();
  cmd->add_option("--model", f->model, "\"model\" field of the requests");
  cmd->add_option("--api-key", f->api_key, "Bearer token");
  cmd->add_option("--model-file", f->model_file,
                  "GGUF file the server runs: size and sha256 go into the result's contract");
  cmd->add_option("--dataset", f->dataset, "random, bible, fortunes or file:PATH")
      ->capture_default_str();
  cmd->add_option("--input-len", f->input_lens, "prompt tokens; a list makes one step each")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--output-len", f->output_len, "answer tokens (ignore_eos)")
      ->capture_default_str();
  cmd->add_option("--range-ratio", f->range_ratio,
                  "lengths uniform in [len*(1-r), len*(1+r)] (vLLM --random-range-ratio)")
      ->capture_default_str();
  cmd->add_option("--num-prompts", f->num_prompts, "requests per run")->capture_default_str();
  cmd->add_option("--request-rate", f->rates,
                  "requests/s (Poisson arrivals) or inf (all at once); a list makes one step each")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--burstiness", f->burstiness, "gamma shape of the arrival gaps (1: Poisson)")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", f->concurrencies,
                  "requests in flight at most (0: unlimited); a list makes one step each")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--warmup", f->warmup, "unmeasured requests before each step")
      ->capture_default_str();
  cmd->add_option("--runs", f->runs, "measured runs per step (medians and spread)")
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "seed of lengths, arrivals and the random dataset")
      ->capture_default_str();
  cmd->add_option("--goodput", f->goodput, "SLOs in ms for goodput, e.g. \"ttft:500 tpot:50\"");
  cmd->add_option("--percentiles", f->percentiles, "percentiles reported")->capture_default_str();
  cmd->add_option("--extra-body", f->extra_body, "JSON object merged into every request body");
  cmd->add_option("--timeout", f->timeout, "seconds one request may take")->capture_default_str();
  cmd->add_option("--guard-max-other", f->guard_max_other,
                  "load guard: repeat a run when other processes used more cores than this "
                  "(< 0: off)")
      ->capture_default_str();
  cmd->add_option("--guard-retries", f->guard_retries, "load guard: repeats per run at most")
      ->capture_default_str();
  cmd->add_option("--known-answer", f->known_answer,
                  "QUESTION=>ANSWER asked (chat, greedy) before each step: a server whose answer "
                  "lacks ANSWER gets no speeds")
      ->capture_default_str();
  cmd->add_flag("--no-known-answer", f->no_known_answer,
                "skip the known-answer guard (random-weight files); the result says so");
  cmd->add_option("--result-file", f->result_file, "write the JSON result here");
  cmd->add_option("--label", f->label, "free text stored in the result");
  cmd->add_option("-o,--output", f->output, "md (vLLM-style report) or json (the result)")
      ->check(CLI::IsMember({"md", "json"}))
      ->capture_default_str();
  cmd->callback([f] { Run(*f); });
}

}  // namespace crossword::tools
