// `crossword bench`: llama-bench-like speed figures (prompt processing ppN, generation tgN, medians
// of repetitions), weight bytes streamed per generated token with GB/s next to the machine's read
// bandwidth, and (--passes) the cost of diffusion / speculative passes relative to one AR step.
#include "cli/bench_command.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/bench_sweep.h"
#include "cli/common.h"
#include "cli/llama_flags.h"
#include "kernels/kernels.h"

namespace crossword::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchFlags {
  ModelFlags model;
  std::shared_ptr<FlagNotes> notes = std::make_shared<FlagNotes>();
  int64_t n_prompt = 512;
  int64_t n_gen = 128;
  int reps = 5;
  int warmup = 1;
  bool passes = false;
  bool sweep = false;
  std::vector<int64_t> sweep_rows = {1, 2, 4, 8, 16, 32};
  int block = 32;
  std::string output = "md";
};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  if (!(in >> a >> b >> c)) return "unknown";
  return a + " " + b + " " + c;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

size_t MatrixBytes(const kernels::Matrix& m) {
  return m.data ? static_cast<size_t>(m.n_out) * m.row_bytes : 0;
}

// Weight bytes one generated token reads: every dense matrix, n_expert_used routed experts per
// layer, the output head and one embedding row (small vectors are copies made at load time).
size_t WeightBytesPerToken(const model::Model& m) {
  const model::Weights& w = m.weights();
  size_t total = MatrixBytes(w.output) + w.token_embd_row_bytes;
  for (const model::LayerWeights& L : w.layers) {
    for (const kernels::Matrix* x : L.DenseMatrices()) total += MatrixBytes(*x);
    size_t expert = 0;
    for (const model::ExpertTensor* e : L.ExpertStacks()) expert += MatrixBytes(e->first);
    total += static_cast<size_t>(m.hparams().n_expert_used) * expert;
  }
  return total;
}

// Read bandwidth of this machine with the engine's threads: the largest tensor of the file (the
// output head, which decoding streams every token) summed as 64-bit words; best of 5 passes.
double ReadBandwidth(const gguf::File& file, ThreadPool& pool, size_t* bytes_read,
                     std::string* what) {
  const gguf::TensorInfo* big = file.FindTensor("output.weight");
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (!big || t.nbytes > big->nbytes) big = &t;
  }
  if (!big || big->nbytes < (64u << 20)) return 0.0;  // too small to leave the caches
  *what = big->name;
  *bytes_read = big->nbytes / 8 * 8;
  return ReadBandwidthOf(big->data, big->nbytes, pool);
}

// One known-answer question for trained files (random-weight synth files have no right answer).
// Its verdict line goes to `out`.
void SanityQuestion(const engine::Engine& e, FILE* out) {
  const gguf::File& file = e.model().file();
  if (IsSynthFile(e)) {
    std::fprintf(
        out, "sanity: skipped: '%s' is a crossword synth file (random weights, no known answer)\n",
        std::string(*file.GetString("general.name")).c_str());
    return;
  }
  std::string question, answer;
  if (auto src = file.GetString("crossword.selfcheck")) {
    const nlohmann::json j = nlohmann::json::parse(*src, nullptr, /*allow_exceptions=*/false);
    if (j.is_array() && !j.empty() && j[0].contains("question") && j[0].contains("answer")) {
      question = j[0]["question"].get<std::string>();
      answer = j[0]["answer"].get<std::string>();
    }
  } else if (e.model().hparams().n_vocab >= 248000) {  // the Qwen3.5 vocabulary (clover-facts.md)
    question = "What is the capital of Australia? One word.";
    answer = "Canberra";
  }
  if (question.empty()) {
    std::fprintf(
        out,
        "sanity: not checked: no known-answer question for this file (no crossword.selfcheck key "
        "and not "
        "a full-vocabulary Clover file)\n");
    return;
  }
  decode::DecodeParams params = e.DefaultDecodeParams();
  params.mode = decode::Mode::kAr;
  params.max_tokens = 48;
  std::vector<int32_t> prompt;
  if (e.chat_template()) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", question}});
    auto cp = e.EncodeChat(messages, nlohmann::ordered_json::array(), {{"enable_thinking", false}});
    prompt = std::move(cp.tokens);
    params.think_open = cp.think_open;
  } else {
    prompt = e.tokenizer().Encode(question, /*parse_special=*/false);
  }
  auto state = e.NewState(static_cast<int64_t>(prompt.size()) + params.max_tokens + 8);
  decode::Generation gen = engine::RunGeneration(e, *state, prompt, params, nullptr);
  const std::string text = e.tokenizer().Decode(gen.output(), false);
  if (Lower(text).find(Lower(answer)) == std::string::npos) {
    Fail(
        "sanity question failed: '{}' was answered '{}' (expected '{}'); this file or build "
        "computes wrong "
        "results, so its speed figures mean nothing",
        question, text, answer);
  }
  std::fprintf(out, "sanity: ok: '%s' -> contains '%s'\n", question.c_str(), answer.c_str());
}

struct Row {
  std::string test;
  std::vector<double> values;  // tokens/s (pp, tg) or milliseconds (passes)
  std::string unit;
  std::string extra;
};

// The SIMD target, and whether the quantized matrices have their load-time tile copy: both change
// the figures, and a run with `--no-repack` or over the repack allowance must not pass for one
// with.
std::string Backend(const engine::Engine& e) { return e.executor().Describe(); }

void Print(const BenchFlags& f, const engine::Engine& e, const std::vector<Row>& rows) {
  const gguf::File& file = e.model().file();
  int64_t params = 0;
  for (const gguf::TensorInfo& t : file.tensors()) params += t.n_elements();
  std::string name = f.model.model.empty() ? e.model_name() : f.model.model;
  if (const size_t slash = name.rfind('/'); slash != std::string::npos)
    name = name.substr(slash + 1);
  if (f.output == "json") {
    for (const Row& r : rows) {
      nlohmann::ordered_json j = {{"model", name},
                                  {"threads", e.executor().host_threads()},
                                  {"test", r.test},
                                  {"unit", r.unit},
                                  {"median", Median(r.values)},
                                  {"samples", r.values},
                                  {"backend", Backend(e)},
                                  {"extra", r.extra}};
      std::printf("%s\n", j.dump().c_str());
    }
    return;
  }
  // Blank lines around the table: Markdown renderers take a line right after a table as one more
  // row. Size and parameters as llama-bench prints them: MiB and M below 1 GiB and 1 B.
  const double bytes = static_cast<double>(file.file_size());
  const std::string size = bytes < double{1 << 30} ? fmt::format("{:.2f} MiB", bytes / (1 << 20))
                                                   : fmt::format("{:.2f} GiB", bytes / (1 << 30));
  const double n = static_cast<double>(params);
  const std::string n_params =
      n < 1e9 ? fmt::format("{:.2f} M", n / 1e6) : fmt::format("{:.2f} B", n / 1e9);
  std::printf(
      "\n| model | size | params | backend | threads | test | median | min | max | extra |\n");
  std::printf("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |\n");
  for (const Row& r : rows) {
    const auto [lo, hi] = std::minmax_element(r.values.begin(), r.values.end());
    std::printf("| %s | %s | %s | %s | %d | %s | %.2f %s | %.2f | %.2f | %s |\n", name.c_str(),
                size.c_str(), n_params.c_str(), Backend(e).c_str(), e.executor().host_threads(),
                r.test.c_str(), Median(r.values), r.unit.c_str(), *lo, *hi, r.extra.c_str());
  }
  std::printf("\n");
}

void RunBench(const BenchFlags& f) {
  if (f.n_prompt < 0 || f.n_gen < 0 || f.reps < 1 || f.warmup < 0 || f.block < 2) {
    Fail("bench: need -p >= 0, -n >= 0, -r >= 1, --warmup >= 0, --block >= 2");
  }
  if (f.n_prompt > kMaxCtx || f.n_gen > kMaxCtx)
    Fail("bench: -p and -n must be at most {} tokens", kMaxCtx);
  // A pass of more rows than this is no block or draft anyone decodes with, and its buffers
  // grow with the rows (a 100,000-row request took 7.5 GB before failing): refused up front.
  constexpr int64_t kMaxPassRows = 1024;
  if (f.block > kMaxPassRows)
    Fail("bench: --block must be at most {} (got {})", kMaxPassRows, f.block);
  for (int64_t t : f.sweep_rows) {
    if (t < 1 || t > kMaxPassRows) {
      Fail("bench: --sweep-rows values must be in [1, {}] (got {})", kMaxPassRows, t);
    }
  }
  if (f.n_prompt == 0 && f.n_gen == 0 && !f.passes && !f.sweep)
    Fail("bench: -p 0 and -n 0 leave nothing to measure; give -p N, -n N, --passes or --sweep");
  // Everything but the result rows goes to stderr in JSON mode, so stdout is one object per line.
  FILE* info = f.output == "json" ? stderr : stdout;
  const GgmlType kv_type = f.model.KvType(f.notes.get());
  f.model.AddNotes(*f.notes);
  f.notes->Print(f.model.MakeLogger());
  std::fprintf(info, "load average before: %s\n", LoadAverage().c_str());
  auto engine = engine::Engine::Load(f.model.ToEngineOptions());
  const model::Model& m = engine->model();
  const model::Executor& x = engine->executor();
  std::fprintf(info, "load: %.2f s (%s, %s)\n", engine->load_seconds(),
               engine->model_name().c_str(), f.model.no_mmap ? "read into RAM" : "mmap");
  SanityQuestion(*engine, info);

  const int64_t n_vocab = m.hparams().n_vocab;
  std::mt19937 rng(1234);
  std::vector<int32_t> prompt(static_cast<size_t>(std::max<int64_t>(f.n_prompt, 1)));
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
  std::vector<int32_t> block(static_cast<size_t>(f.block));
  for (int32_t& t : block) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
  // --passes: the AR step's own tokens, one untimed step and 3 timed (TimeArStep).
  std::vector<int32_t> ar_tokens(4);
  for (int32_t& t : ar_tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));

  model::ContextOptions co;
  co.max_tokens = std::max<int64_t>({f.n_prompt, f.block, 1});
  co.max_logit_rows = f.block;
  std::unique_ptr<model::ForwardContext> ctx_owner = x.NewContext(co);
  model::ForwardContext& ctx = *ctx_owner;
  model::StateOptions so;
  so.n_ctx = std::max(f.n_prompt, f.n_gen) + f.block + 8;
  so.kv_type = kv_type;
  so.max_record_tokens = f.block;
  auto st = x.NewState(so);

  auto pp = [&] {
    st->Reset();
    model::SequenceInput in{st.get(), prompt, model::PassKind::kCausal, model::LogitRows::kLast};
    const auto t0 = Clock::now();
    x.Forward({&in, 1}, ctx);
    return static_cast<double>(f.n_prompt) / Seconds(t0, Clock::now());
  };
  auto tg = [&] {
    st->Reset();
    int32_t tok = prompt[0];
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < f.n_gen; ++i) {
      model::SequenceInput in{
          st.get(), {&tok, 1}, model::PassKind::kCausal, model::LogitRows::kLast};
      x.Forward({&in, 1}, ctx);
      // The greedy choice as the engine makes it (kernels::ArgMax): std::max_element's scalar
      // scan took ~12 % of a one-row step of the embedded model (perf, tg96), which llama-bench's
      // tg (random tokens, logits unread) does not pay either.
      const auto logits = ctx.logits(0);
      tok = static_cast<int32_t>(
          kernels::ArgMax(logits.data(), static_cast<int64_t>(logits.size()), -1));
    }
    return static_cast<double>(f.n_gen) / Seconds(t0, Clock::now());
  };

  std::vector<Row> rows;
  Row rpp{"pp" + std::to_string(f.n_prompt), {}, "t/s", ""};
  Row rtg{"tg" + std::to_string(f.n_gen), {}, "t/s", ""};
  for (int i = 0; i < f.warmup; ++i) {
    if (f.n_prompt > 0) pp();
    if (f.n_gen > 0) tg();
  }
  for (int i = 0; i < f.reps; ++i) {  // pp and tg interleaved, as load changes over time
    if (f.n_prompt > 0) rpp.values.push_back(pp());
    if (f.n_gen > 0) rtg.values.push_back(tg());
  }
  const size_t bytes = WeightBytesPerToken(m);
  size_t bw_bytes = 0;
  std::string bw_tensor;
  // The host's read bandwidth, on as many threads as the executor computes with (its own pool
  // is idle meanwhile).
  ThreadPool pool(x.host_threads());
  const double bw = ReadBandwidth(m.file(), pool, &bw_bytes, &bw_tensor);
  if (f.n_gen > 0) {
    rtg.extra = fmt::format("{:.1f} GB/s of weights ({:.3f} GB/token); machine read bandwidth {}",
                            static_cast<double>(bytes) * Median(rtg.values) / 1e9,
                            static_cast<double>(bytes) / 1e9,
                            bw > 0 ? fmt::format("{:.1f} GB/s", bw) : "n/a (file under 64 MiB)");
  }
  if (f.n_prompt > 0) rows.push_back(rpp);
  if (f.n_gen > 0) rows.push_back(rtg);

  if (f.passes) {
    // Pass costs at a context of n_prompt tokens; the committed state is restored before each.
    model::StateSnapshot snap;
    st->Reset();
    {
      model::SequenceInput in{st.get(), prompt, model::PassKind::kCausal, model::LogitRows::kNone};
      if (f.n_prompt > 0) x.Forward({&in, 1}, ctx);
    }
    st->SaveSnapshot(snap);
    const std::string b = std::to_string(f.block);
    Row ar{"ar step", {}, "ms", ""}, den{"denoise" + b, {}, "ms", ""},
        ver{"verify" + b, {}, "ms", ""};
    std::vector<int64_t> keeps = {1, f.block / 2, f.block - 1};  // replays keep tokens
    std::vector<Row> rb;
    for (int64_t k : keeps) rb.push_back({"rollback keep " + std::to_string(k), {}, "ms", ""});
    auto time_pass = [&](std::span<const int32_t> tokens, model::PassKind kind,
                         model::LogitRows logits, bool record) {
      st->Restore(snap);
      // Renewed each time: a snapshot survives only the last 4096 KV rewrites (SequenceState).
      st->SaveSnapshot(snap);
      model::SequenceInput in{st.get(), tokens, kind, logits, record};
      const auto t0 = Clock::now();
      x.Forward({&in, 1}, ctx);
      return 1e3 * Seconds(t0, Clock::now());
    };
    for (int i = 0; i < f.warmup + f.reps; ++i) {
      const bool keep = i >= f.warmup;
      const double a = TimeArStep(x, ctx, *st, snap, ar_tokens);
      const double d = time_pass(block, model::PassKind::kDenoise, model::LogitRows::kAll, false);
      const double v = time_pass(block, model::PassKind::kCausal, model::LogitRows::kAll, true);
      if (keep) {
        ar.values.push_back(a);
        den.values.push_back(d);
        ver.values.push_back(v);
      }
      for (size_t j = 0; j < keeps.size(); ++j) {
        time_pass(block, model::PassKind::kCausal, model::LogitRows::kAll, true);
        const auto t0 = Clock::now();
        st->RollbackTo(keeps[j]);
        if (keep) rb[j].values.push_back(1e3 * Seconds(t0, Clock::now()));
      }
    }
    const double a = Median(ar.values);
    den.extra = fmt::format("{:.2f} x AR step", Median(den.values) / a);
    ver.extra = fmt::format("{:.2f} x AR step", Median(ver.values) / a);
    for (Row& r : rb) r.extra = fmt::format("{:.3f} x AR step", Median(r.values) / a);
    ar.extra = fmt::format("at {} tokens of context", f.n_prompt);
    rows.push_back(ar);
    rows.push_back(den);
    rows.push_back(ver);
    for (Row& r : rb) rows.push_back(r);
  }
  Print(f, *engine, rows);
  if (!bw_tensor.empty()) {
    std::fprintf(info,
                 "machine read bandwidth: %.1f GB/s (%d threads, best of 5 reads of %s, %.2f GB)\n",
                 bw, pool.size(), bw_tensor.c_str(), static_cast<double>(bw_bytes) / 1e9);
  }
  if (f.sweep) {
    SweepOptions so;
    so.rows = f.sweep_rows;
    so.reps = f.reps;
    so.warmup = f.warmup;
    so.json = f.output == "json";
    so.model_name = f.model.model.empty() ? engine->model_name() : f.model.model;
    RunPassSweep(*engine, std::span(prompt).first(static_cast<size_t>(f.n_prompt)), so, stdout,
                 info);
  }
  std::fprintf(info, "load average after: %s\n", LoadAverage().c_str());
  std::fflush(stdout);
}

}  // namespace

void RegisterBenchCommand(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "measure prompt processing and generation speed (llama-bench style), optionally pass costs");
  flags->model.Add(cmd, kBench, /*model_required=*/false);
  AddNoEffectFlags(cmd, kBench, flags->notes);
  cmd->add_option("-p,--n-prompt", flags->n_prompt, "prompt tokens of the pp test (0: skip)")
      ->capture_default_str();
  cmd->add_option("-n,--n-gen", flags->n_gen, "generated tokens of the tg test (0: skip)")
      ->capture_default_str();
  cmd->add_option("-r,--repetitions", flags->reps, "measured repetitions (the median is reported)")
      ->capture_default_str();
  cmd->add_option("--warmup", flags->warmup, "unmeasured warm-up runs")->capture_default_str();
  cmd->add_flag("--passes", flags->passes,
                "also time an AR step, a denoise pass and a verify pass of --block tokens, and GDN "
                "rollbacks");
  cmd->add_option("--block", flags->block, "block / draft length of --passes")
      ->capture_default_str();
  cmd->add_flag(
      "--sweep", flags->sweep,
      "time AR-step, verify and denoise passes for each of --sweep-rows rows (and commit, "
      "fused and mid-block denoise passes; docs/decoding.md, \"Instrument\"), each beside its "
      "floor (bytes read / measured read bandwidth, multiply-adds / measured int8 peak) and "
      "the distinct experts per layer it used");
  cmd->add_option("--sweep-rows", flags->sweep_rows,
                  "rows T of the --sweep passes (T = 1 is the AR step, the unit of their x AR step "
                  "column; it is always timed)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-o,--output", flags->output, "md (table) or json (one object per line)")
      ->check(CLI::IsMember({"md", "json"}))
      ->capture_default_str();
  // `crossword bench serve` (src/tools) is a subcommand of this one; its run replaces this one.
  cmd->callback([flags, cmd] {
    if (cmd->get_subcommands().empty() && !flags->model.ListDevicesIfAsked()) RunBench(*flags);
  });
}

}  // namespace crossword::cli
