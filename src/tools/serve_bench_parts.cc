// The steps of `crossword bench serve` (see serve_bench_parts.h).
#include "tools/serve_bench_parts.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "base/error.h"
#include "tools/load_guard.h"

namespace crossword::tools::servebench {
namespace {

using json = nlohmann::ordered_json;

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
        "decode_tok_s", "prefill_tok_s", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
        "p99_tpot_ms", "median_itl_ms", "p99_itl_ms", "median_e2el_ms", "p99_e2el_ms",
        "tokens_per_chunk", "tokens_per_pass"}) {
    // TPOT of runs without a request of more than one answer token (prefill) is no figure.
    const bool tpot = std::string(key).find("tpot") != std::string::npos;
    std::vector<double> v;
    for (const json& r : runs) {
      if (tpot && r.value("tpot_ms", json::object()).value("n", 0) == 0) continue;
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

double ParseRate(const std::string& s) {
  if (s == "inf") return std::numeric_limits<double>::infinity();
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  Check(*end == '\0' && v > 0, "--request-rate: '{}' is not a rate > 0 or inf", s);
  return v;
}

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

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

const std::vector<std::string>& KnownParts() {
  static const std::vector<std::string> kParts = {"guard", "decode", "prefill", "conc",
                                                  "ctx",   "mem",    "needle"};
  return kParts;
}

std::string NeedleCode(uint64_t seed, int64_t size, double depth) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(size) * 1000003ULL +
                      static_cast<uint64_t>(std::llround(depth * 1000)));
  return std::to_string(10000 + rng() % 90000);
}

StepRunner::StepRunner(const BenchFlags& flags, int64_t corpus_tokens)
    : f_(flags), corpus_tokens_(corpus_tokens) {
  Check(f_.url.empty() != f_.spawn.empty(), "bench serve: give exactly one of --url and --spawn");
  pcts_ = ParseList(f_.percentiles);
  for (double p : pcts_) Check(p >= 0 && p <= 100, "--percentiles: {} is not in [0, 100]", p);
  slo_ = ParseSlo(f_.goodput);
  extra_ = json::object();
  if (!f_.extra_body.empty()) {
    extra_ = json::parse(f_.extra_body, nullptr, false);
    Check(extra_.is_object(), "--extra-body must be a JSON object");
  }
  target_ = f_.spawn.empty() ? ParseUrl(f_.url) : Target{};
  target_.endpoint = f_.endpoint;
  target_.model = f_.model;
  target_.api_key = f_.api_key;
  target_.timeout_s = f_.timeout;
  // A wrong --url is said as such up front, not as the known-answer guard's or /tokenize's failure.
  if (!f_.url.empty() && HttpGet(target_, "/health", nullptr, 5) == 0) {
    Fail(
        "bench serve: no server answers at {} (connection failed); start one there, or let bench "
        "serve start one per step with --spawn \"COMMAND\"",
        f_.url);
  }
  spawn_log_ = f_.spawn_log.empty() ? (std::filesystem::temp_directory_path() /
                                       fmt::format("crossword-bench-serve-{}.log", getpid()))
                                          .string()
                                    : f_.spawn_log;
}

StepRunner::~StepRunner() = default;

std::unique_ptr<SpawnedServer> StepRunner::Start(const std::string& command_template, int64_t ctx) {
  if (command_template.empty()) return nullptr;
  return std::make_unique<SpawnedServer>(command_template, ctx, spawn_log_, f_.spawn_timeout,
                                         target_);
}

pid_t StepRunner::ServerPid(const SpawnedServer* server) const {
  return server ? server->pid() : FindListeningPid("/proc", target_.port);
}

json StepRunner::KnownAnswer(bool spawned) {
  if (f_.no_known_answer) {
    return {{"checked", false},
            {"note", "--no-known-answer: speeds of a model whose answers were not checked"}};
  }
  if (!spawned && !url_answer_.is_null()) return url_answer_;
  const size_t sep = f_.known_answer.find("=>");
  Check(sep != std::string::npos && sep > 0 && sep + 2 < f_.known_answer.size(),
        "--known-answer: '{}' is not QUESTION=>ANSWER", f_.known_answer);
  const std::string question = f_.known_answer.substr(0, sep);
  const std::string expected = f_.known_answer.substr(sep + 2);
  std::string answer;
  try {
    answer = AskChat(target_, question, 64);
  } catch (const Error& e) {
    Fail("known-answer guard: asked \"{}\" and got no answer ({}); --no-known-answer overrides",
         question, e.what());
  }
  Check(Lower(answer).find(Lower(expected)) != std::string::npos,
        "known-answer guard: asked \"{}\", expected \"{}\" in the answer, got \"{}\"; no speeds "
        "for a model that answers wrong (--no-known-answer overrides, e.g. for random-weight "
        "files, and says so in the result)",
        question, expected, answer.substr(0, 200));
  json out = {
      {"checked", true}, {"question", question}, {"expected", expected}, {"answer", answer}};
  if (!spawned) url_answer_ = out;
  return out;
}

void StepRunner::EnsureCorpus() {
  if (!corpus_.empty()) return;
  // Enough text for the longest step (~4 characters per token, with room).
  const auto chars = static_cast<size_t>(std::min<int64_t>(64 << 20, corpus_tokens_ * 6 + 4096));
  const std::string text = DatasetText(f_.dataset, chars, f_.seed);
  for (size_t at = 0; at < text.size();) {
    // Pieces of ~32 KB cut at a space: bounded request bodies.
    size_t end = std::min(text.size(), at + 32768);
    if (end < text.size()) {
      const size_t sp = text.rfind(' ', end);
      if (sp != std::string::npos && sp > at) end = sp;
    }
    const std::vector<int32_t> ids = Tokenize(target_, text.substr(at, end - at));
    corpus_.insert(corpus_.end(), ids.begin(), ids.end());
    at = end;
  }
}

json StepRunner::Guard() {
  std::unique_ptr<SpawnedServer> server = Start(f_.spawn, 0);
  json step = {{"part", "guard"}};
  if (server) step["server_command"] = server->command();
  step["known_answer"] = KnownAnswer(server != nullptr);
  return step;
}

json StepRunner::Measured(const StepSpec& spec) {
  const double rate = ParseRate(spec.rate);
  Check(spec.concurrency >= 0, "--max-concurrency must be >= 0 (0: unlimited)");
  std::unique_ptr<SpawnedServer> server = Start(f_.spawn, spec.input_len + spec.output_len);
  json step = {{"part", spec.part},
               {"input_len", spec.input_len},
               {"output_len", spec.output_len},
               {"max_concurrency", spec.concurrency},
               {"request_rate", spec.rate},
               {"num_prompts", spec.num_prompts}};
  if (server) {
    step["server_command"] = server->command();
    step["server_ready_s"] = server->ready_s();
  }
  step["known_answer"] = KnownAnswer(server != nullptr);
  EnsureCorpus();
  // Every measured run and every warm-up request gets prompts of its own (distinct windows of
  // the corpus): a prompt sent twice is a prompt-cache hit on both crossword and llama-server,
  // and its TTFT and prefill tok/s would measure the cache, not the prefill.
  // Sets: one per run and load-guard repeat (a repeated run must not meet its own prompts in the
  // cache either), then the warm-ups' set.
  const int64_t n_sets = static_cast<int64_t>(f_.runs) * (f_.guard_retries + 1) + 1;
  int64_t next_set = 0;
  std::vector<RequestSpec> all = BuildRequests(corpus_, {spec.num_prompts * n_sets, spec.input_len,
                                                         spec.output_len, f_.range_ratio, f_.seed});
  // A set's prompts are detokenized (chat endpoints) only when the set is used: the repeat sets
  // rarely are, and each detokenization is a request to the server.
  auto run_set = [&](int64_t set) {
    std::vector<RequestSpec> out(all.begin() + set * spec.num_prompts,
                                 all.begin() + (set + 1) * spec.num_prompts);
    if (target_.Chat()) {
      for (RequestSpec& r : out) r.prompt_text = Detokenize(target_, r.prompt_ids);
    }
    return out;
  };
  const std::vector<RequestSpec> warmups = run_set(n_sets - 1);
  const pid_t server_pid = ServerPid(server.get());
  std::vector<pid_t> watched = {getpid()};
  if (server_pid > 0) watched.push_back(server_pid);
  LoadGuard guard("/proc", watched, server_pid > 0 ? f_.guard_max_other : -1, f_.guard_retries);
  step["server_pid_found"] = server_pid > 0;
  const std::string title = fmt::format(
      "{}input {} output {} concurrency {} rate {}", spec.part == "grid" ? "" : spec.part + ": ",
      spec.input_len, spec.output_len,
      spec.concurrency == 0 ? std::string("unlimited") : std::to_string(spec.concurrency),
      spec.rate);
  for (int w = 0; w < f_.warmup; ++w) {
    const RequestRecord r = SendRequest(target_, warmups[static_cast<size_t>(w) % warmups.size()],
                                        extra_, Clock::now());
    Check(r.ok, "warm-up request failed: {}", r.error);
  }
  std::vector<json> runs;
  for (int run = 0; run < f_.runs; ++run) {
    json attempts = json::array();
    for (int attempt = 0;; ++attempt) {
      LoadOptions load;
      load.request_rate = rate;
      load.burstiness = f_.burstiness;
      load.max_concurrency = spec.concurrency;
      load.seed = f_.seed + static_cast<uint64_t>(run);
      load.progress = [&](int64_t d, int64_t n) {
        Progress(fmt::format("{} run {}", title, run + 1), d, n);
      };
      guard.Begin();
      const RunResult rr = RunLoad(target_, run_set(next_set++), extra_, load);
      const GuardSample g = guard.End();
      attempts.push_back(
          {{"other_cores", g.other_cores}, {"loadavg", g.loadavg}, {"busy", g.busy}});
      if (guard.ShouldRepeat(g, attempt)) {
        std::fprintf(stderr,
                     "bench serve: other processes used %.2f cores during the run (limit %.2f): "
                     "repeating it\n",
                     g.other_cores, f_.guard_max_other);
        continue;
      }
      const Metrics m = ComputeMetrics(rr.records, rr.duration_s, slo_, pcts_);
      if (f_.output == "md") PrintRun(m, pcts_, fmt::format("{} run {}", title, run + 1));
      if (g.busy) {
        // The guard gave up: the run is kept (the JSON has every attempt under "guard"), and the
        // report says so beside its figures.
        const std::string note = fmt::format(
            "load guard: other processes still used {:.2f} cores (limit {:.2f}) after {} "
            "repeat(s); this run is kept and its figures may be low",
            g.other_cores, f_.guard_max_other, attempt);
        std::fprintf(stderr, "bench serve: %s\n", note.c_str());
        if (f_.output == "md") std::printf("%s\n", note.c_str());
      }
      json mj = MetricsJson(m);
      // Clover's reference figures: decode = tokens after the first / time after the first;
      // prefill = prompt tokens / time to the first token.
      if (m.tpot_ms.n > 0 && m.tpot_ms.median > 0) mj["decode_tok_s"] = 1000.0 / m.tpot_ms.median;
      if (m.completed > 0 && m.ttft_ms.median > 0) {
        mj["prefill_tok_s"] = static_cast<double>(m.total_input) /
                              static_cast<double>(m.completed) * 1000.0 / m.ttft_ms.median;
      }
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
  return step;
}

std::vector<json> StepRunner::Mem(const std::vector<int64_t>& sizes) {
  const std::string& command = f_.mem_spawn.empty() ? f_.spawn : f_.mem_spawn;
  Check(!command.empty(),
        "--parts mem needs --spawn (or --mem-spawn): memory per context size is measured on a "
        "freshly started server per size; with --url each step records the server's peak RSS "
        "since its own start (server_peak_rss_mib)");
  std::vector<json> steps;
  for (int64_t size : sizes) {
    Check(size >= 1, "--ctx-ladder: {} is not a size >= 1", size);
    const int64_t ctx = size + f_.ctx_output_len;
    json step = {{"part", "mem"},
                 {"input_len", size},
                 {"output_len", f_.ctx_output_len},
                 {"server_ctx", ctx}};
    try {
      std::unique_ptr<SpawnedServer> server = Start(command, ctx);
      step["server_command"] = server->command();
      step["server_ready_s"] = server->ready_s();
      step["idle_rss_mib"] = StatusMiB(server->pid(), "VmRSS:");
      EnsureCorpus();
      RequestSpec r = BuildRequests(corpus_, {1, size, f_.ctx_output_len, 0, f_.seed})[0];
      if (target_.Chat()) r.prompt_text = Detokenize(target_, r.prompt_ids);
      const RequestRecord rec = SendRequest(target_, r, extra_, Clock::now());
      step["rss_mib"] = StatusMiB(server->pid(), "VmRSS:");
      step["peak_rss_mib"] = StatusMiB(server->pid(), "VmHWM:");
      step["ok"] = rec.ok;
      if (!rec.ok) step["error"] = rec.error;
      step["prompt_tokens"] = rec.prompt_tokens;
      step["output_tokens"] = rec.output_tokens;
      step["ttft_ms"] = rec.ttft_s * 1000;
      step["e2el_ms"] = rec.e2e_s * 1000;
    } catch (const Error& e) {
      step["ok"] = false;
      step["error"] = e.what();
    }
    if (f_.output == "md") {
      std::printf("mem: context %lld: %s, peak RSS %.1f MiB (idle %.1f MiB)\n",
                  static_cast<long long>(ctx), step["ok"].get<bool>() ? "answered" : "FAILED",
                  step.value("peak_rss_mib", -1.0), step.value("idle_rss_mib", -1.0));
      std::fflush(stdout);
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

std::vector<json> StepRunner::Needle(const std::vector<int64_t>& sizes,
                                     const std::vector<double>& depths) {
  for (double d : depths) Check(d >= 0 && d <= 1, "--needle-depths: {} is not in [0, 1]", d);
  std::vector<json> steps;
  for (int64_t size : sizes) {
    std::unique_ptr<SpawnedServer> server = Start(f_.spawn, size + f_.needle_max_tokens);
    EnsureCorpus();
    // Tokens the chat template adds around a user message: a one-word message's prompt_tokens
    // less the word's own tokens.
    const std::string probe = "Hello";
    const int64_t probe_tokens = static_cast<int64_t>(Tokenize(target_, probe).size());
    const ChatAnswer probe_answer = Chat(target_, probe, 1);
    const int64_t overhead =
        probe_answer.prompt_tokens >= 0 ? probe_answer.prompt_tokens - probe_tokens : 0;
    const std::string question =
        "\n\nWhat is the secret code mentioned in the text above? Answer with the code only.";
    const auto question_tokens = static_cast<int64_t>(Tokenize(target_, question).size());
    for (double depth : depths) {
      const std::string code = NeedleCode(f_.seed, size, depth);
      const std::string needle = " The secret code is " + code + ". ";
      const auto needle_tokens = static_cast<int64_t>(Tokenize(target_, needle).size());
      const int64_t filler = size - overhead - needle_tokens - question_tokens;
      Check(filler >= 1,
            "--needle-ctx: {} tokens leave no room for filler (needle {}, question {}, "
            "template {})",
            size, needle_tokens, question_tokens, overhead);
      const auto before = static_cast<int64_t>(std::llround(depth * static_cast<double>(filler)));
      std::vector<int32_t> a, b;
      const auto total = static_cast<int64_t>(corpus_.size());
      for (int64_t k = 0; k < filler; ++k)
        (k < before ? a : b).push_back(corpus_[static_cast<size_t>(k % total)]);
      const std::string prompt = (a.empty() ? "" : Detokenize(target_, a)) + needle +
                                 (b.empty() ? "" : Detokenize(target_, b)) + question;
      json step = {{"part", "needle"}, {"input_len", size}, {"depth", depth}, {"code", code}};
      if (server) step["server_command"] = server->command();
      try {
        const ChatAnswer answer = Chat(target_, prompt, f_.needle_max_tokens);
        step["prompt_tokens"] = answer.prompt_tokens;
        step["answer"] = answer.text.substr(0, 300);
        step["pass"] = answer.text.find(code) != std::string::npos;
        step["seconds"] = answer.seconds;
      } catch (const Error& e) {
        step["pass"] = false;
        step["error"] = e.what();
      }
      if (f_.output == "md") {
        std::printf("needle: context %lld depth %.2f: %s\n", static_cast<long long>(size), depth,
                    step["pass"].get<bool>() ? "pass" : "FAIL");
        std::fflush(stdout);
      }
      steps.push_back(std::move(step));
    }
  }
  return steps;
}

}  // namespace crossword::tools::servebench
