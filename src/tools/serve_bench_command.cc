// `crossword bench serve`: a classic step grid (input length x concurrency x request rate) or the
// reference method's parts (--parts guard,decode,prefill,conc,ctx,mem,needle), each step with
// warm-up requests and measured runs under the load guard, against a server at --url or one
// started per step by --spawn; a vLLM-style report, a JSON result with the run's contract, SVG
// charts and (--compare) the side-by-side table of several servers' results.
#include "tools/serve_bench_command.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "base/error.h"
#include "tools/load_guard.h"
#include "tools/serve_bench_parts.h"
#include "tools/serve_bench_report.h"

namespace crossword::tools {
namespace {

using json = nlohmann::ordered_json;
using namespace servebench;  // NOLINT(build/namespaces): this file is the tool's front end

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

json ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  Check(in.good(), "--compare: cannot read {}", path);
  json j = json::parse(in, nullptr, false);
  Check(j.is_object() && j.contains("steps"), "--compare: {} is not a bench serve result", path);
  return j;
}

// Writes the charts of `groups` and report.md into `dir` (created); returns the files written.
std::vector<std::string> WriteCharts(const std::string& dir,
                                     const std::vector<LabeledResults>& groups) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  Check(!ec, "--charts: cannot create {}: {}", dir, ec.message());
  std::vector<std::string> written;
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    std::ofstream out(path);
    Check(out.good(), "--charts: cannot write {}", path);
    out << text;
    written.push_back(path);
  };
  std::string md = CompareMarkdown(groups);
  const auto charts = Charts(groups);
  if (!charts.empty()) md += "\n";
  for (const auto& [name, svg] : charts) {
    write(name, svg);
    md += fmt::format("![{}]({})\n", name, name);
  }
  write("report.md", md);
  return written;
}

// --compare A.json B.json ...: the side-by-side table (stdout) and, with --charts, the charts.
void Compare(const BenchFlags& f) {
  Check(f.url.empty() && f.spawn.empty(), "--compare reads result files: no --url or --spawn");
  std::vector<std::pair<std::string, json>> files;
  for (const std::string& path : f.compare) files.emplace_back(path, ReadJsonFile(path));
  const std::vector<LabeledResults> groups = GroupByLabel(files);
  std::printf("%s", CompareMarkdown(groups).c_str());
  if (!f.charts_dir.empty()) {
    for (const std::string& p : WriteCharts(f.charts_dir, groups))
      std::fprintf(stderr, "bench serve: wrote %s\n", p.c_str());
  }
}

// The steps --parts asks for, in the order given (measured steps; mem, needle and guard apart).
void RunParts(const BenchFlags& f, StepRunner& runner, json& steps) {
  auto measured = [&](const char* part, int64_t in, int64_t out, int64_t n, int conc) {
    StepSpec s;
    s.part = part;
    s.input_len = in;
    s.output_len = out;
    s.num_prompts = n;
    s.concurrency = conc;
    steps.push_back(runner.Measured(s));
  };
  for (const std::string& part : f.parts) {
    if (part == "guard") {
      steps.push_back(runner.Guard());
    } else if (part == "decode") {
      measured("decode", f.decode_input_len, f.output_len, 1, 1);
    } else if (part == "prefill") {
      measured("prefill", f.prefill_len, 1, 1, 1);
    } else if (part == "conc") {
      // C requests sent together (more than the server's slots queue there).
      for (int c : f.conc_levels) {
        Check(c >= 1, "--conc-levels: {} is not >= 1", c);
        measured("conc", f.conc_input_len, f.output_len, c, c);
      }
    } else if (part == "ctx") {
      for (int64_t n : f.ctx_ladder) measured("ctx", n, f.ctx_output_len, 1, 1);
    } else if (part == "mem") {
      for (json& s : runner.Mem(f.ctx_ladder)) steps.push_back(std::move(s));
    } else if (part == "needle") {
      for (json& s :
           runner.Needle(f.needle_ctx.empty() ? f.ctx_ladder : f.needle_ctx, f.needle_depths))
        steps.push_back(std::move(s));
    }
  }
}

void Run(const BenchFlags& f) {
  if (!f.compare.empty()) return Compare(f);
  Check(f.url.empty() != f.spawn.empty(), "bench serve: give exactly one of --url and --spawn");
  Check(f.warmup >= 0 && f.runs >= 1, "--warmup must be >= 0 and --runs >= 1");
  for (const std::string& p : f.parts) {
    Check(std::find(KnownParts().begin(), KnownParts().end(), p) != KnownParts().end(),
          "--parts: '{}' is not one of guard, decode, prefill, conc, ctx, mem, needle", p);
  }
  const bool has_mem = std::find(f.parts.begin(), f.parts.end(), "mem") != f.parts.end();
  Check(!has_mem || !f.spawn.empty(),
        "--parts mem needs --spawn: memory per context size is measured on a server started "
        "afresh per size (with --url, each step records the server's peak RSS since its own "
        "start as server_peak_rss_mib)");
  for (int c : f.concurrencies) Check(c >= 0, "--max-concurrency must be >= 0 (0: unlimited)");
  for (const std::string* cmd : {&f.spawn, &f.mem_spawn}) {
    if (!cmd->empty()) ExpandCommand(*cmd, 0, 0);  // throws when {port} is missing
  }

  // The dataset tokens the longest step needs.
  int64_t corpus_tokens = 0;
  if (f.parts.empty()) {
    for (int64_t n : f.input_lens) corpus_tokens = std::max(corpus_tokens, n * f.num_prompts);
  } else {
    corpus_tokens = std::max({f.decode_input_len, f.prefill_len, f.conc_input_len});
    for (int c : f.conc_levels) corpus_tokens = std::max(corpus_tokens, f.conc_input_len * c);
    for (int64_t n : f.ctx_ladder) corpus_tokens = std::max(corpus_tokens, n);
    for (int64_t n : f.needle_ctx) corpus_tokens = std::max(corpus_tokens, n);
  }
  StepRunner runner(f, corpus_tokens);

  json result = {{"tool", "crossword bench serve"}, {"version", "crossword 0.1.0"}};
  json contract = {{"command", CommandLine()},
                   {"started_utc", UtcNow()},
                   {"url", f.url},
                   {"spawn", f.spawn},
                   {"mem_spawn", f.mem_spawn},
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
  json config = {{"parts", f.parts},
                 {"input_len", f.input_lens},
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
                 {"percentiles", runner.percentiles()},
                 {"extra_body", runner.extra_body()},
                 {"label", f.label},
                 {"guard_max_other_cores", f.guard_max_other},
                 {"guard_retries", f.guard_retries}};
  if (!f.parts.empty()) {
    config["decode_input_len"] = f.decode_input_len;
    config["prefill_len"] = f.prefill_len;
    config["conc_levels"] = f.conc_levels;
    config["conc_input_len"] = f.conc_input_len;
    config["ctx_ladder"] = f.ctx_ladder;
    config["ctx_output_len"] = f.ctx_output_len;
    config["needle_ctx"] = f.needle_ctx.empty() ? f.ctx_ladder : f.needle_ctx;
    config["needle_depths"] = f.needle_depths;
    config["needle_max_tokens"] = f.needle_max_tokens;
  }
  result["config"] = config;

  json steps = json::array();
  if (f.parts.empty()) {
    for (int64_t input_len : f.input_lens) {
      for (int conc : f.concurrencies) {
        for (const std::string& rate : f.rates) {
          StepSpec s;
          s.input_len = input_len;
          s.output_len = f.output_len;
          s.num_prompts = f.num_prompts;
          s.concurrency = conc;
          s.rate = rate;
          steps.push_back(runner.Measured(s));
        }
      }
    }
  } else {
    RunParts(f, runner, steps);
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
  if (!f.charts_dir.empty()) {
    const std::string name = f.result_file.empty() ? "result" : f.result_file;
    for (const std::string& p : WriteCharts(f.charts_dir, GroupByLabel({{name, result}})))
      std::fprintf(stderr, "bench serve: wrote %s\n", p.c_str());
  }
  if (f.output == "json") std::printf("%s\n", result.dump(2).c_str());
}

}  // namespace

void RegisterBenchServeCommand(CLI::App& bench) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = bench.add_subcommand(
      "serve",
      "benchmark an OpenAI-compatible server the way vLLM's benchmark_serving does (TTFT, TPOT, "
      "ITL, E2EL, throughput, goodput) under a request rate and concurrency; see docs/bench.md");
  auto* url = cmd->add_option("--url", f->url, "server to measure, e.g. http://127.0.0.1:8080");
  cmd->add_option("--spawn", f->spawn,
                  "start this server command per step instead (must contain {port}; {ctx} becomes "
                  "the step's prompt + answer tokens); its peak resident memory is recorded")
      ->excludes(url);
  cmd->add_option("--mem-spawn", f->mem_spawn,
                  "server command of the mem part (default: --spawn), e.g. with -np 1 -c {ctx}");
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
  cmd->add_option("--label", f->label,
                  "name of the server in the result (--compare groups result files by it)");
  cmd->add_option("--parts", f->parts,
                  "run the reference method's parts instead of the --input-len grid, in this "
                  "order: guard,decode,prefill,conc,ctx,mem,needle")
      ->delimiter(',');
  cmd->add_option("--decode-input-len", f->decode_input_len,
                  "decode part: prompt tokens (one request, --output-len answer tokens)")
      ->capture_default_str();
  cmd->add_option("--prefill-len", f->prefill_len,
                  "prefill part: prompt tokens (one request, one answer token)")
      ->capture_default_str();
  cmd->add_option("--conc-levels", f->conc_levels,
                  "conc part: requests sent together per step (--conc-input-len prompt and "
                  "--output-len answer tokens each)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--conc-input-len", f->conc_input_len, "conc part: prompt tokens")
      ->capture_default_str();
  cmd->add_option("--ctx-ladder", f->ctx_ladder,
                  "ctx and mem parts: prompt tokens per step (one request each)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--ctx-output-len", f->ctx_output_len, "ctx and mem parts: answer tokens")
      ->capture_default_str();
  cmd->add_option("--needle-ctx", f->needle_ctx,
                  "needle part: prompt tokens per step (default: --ctx-ladder)")
      ->delimiter(',');
  cmd->add_option("--needle-depths", f->needle_depths,
                  "needle part: where the code sits in the filler, 0 (start) to 1 (end)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--needle-max-tokens", f->needle_max_tokens, "needle part: answer tokens at most")
      ->capture_default_str();
  cmd->add_option("--charts", f->charts_dir,
                  "write SVG charts and report.md (the table) into this folder");
  cmd->add_option("--compare", f->compare,
                  "result files to put side by side (grouped by --label; no server is run): "
                  "markdown table on stdout, charts with --charts")
      ->expected(1, -1);
  cmd->add_option("-o,--output", f->output, "md (vLLM-style report) or json (the result)")
      ->check(CLI::IsMember({"md", "json"}))
      ->capture_default_str();
  cmd->callback([f] { Run(*f); });
}

}  // namespace crossword::tools
