// `crossword run`: stream a model's answer to a prompt (plain or through the chat template).
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <type_traits>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/llama_flags.h"
#include "grammar/json_schema.h"

namespace crossword::cli {
namespace {

struct RunFlags {
  ModelFlags model;
  DecodeFlags decode;
  std::shared_ptr<FlagNotes> notes = std::make_shared<FlagNotes>();
  std::string prompt, file, system;
  std::string grammar_file, json_schema_file;
  bool chat = false, no_think = false, stats = false;
  bool prompt_given = false;  // -p was on the command line (perhaps as "")
};

// Ctrl-C while `run` generates: the first SIGINT ends the generation between passes (the answer
// so far, a final newline and the stats line are still printed; exit code 130), a second one exits
// at once. SIGINT is blocked for every thread created while this lives and taken by one watcher.
class InterruptWatch {
 public:
  InterruptWatch() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
    thread_ = std::thread([this] {
      const timespec tick{0, 50 * 1000 * 1000};
      while (!done_.load()) {
        if (sigtimedwait(&set_, nullptr, &tick) != SIGINT) continue;
        if (interrupted_.exchange(true)) {
          std::fputs("\n", stdout);
          std::fflush(stdout);
          _exit(130);
        }
      }
    });
  }
  ~InterruptWatch() {
    done_.store(true);
    thread_.join();
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  InterruptWatch(const InterruptWatch&) = delete;
  InterruptWatch& operator=(const InterruptWatch&) = delete;
  bool interrupted() const { return interrupted_.load(); }

 private:
  sigset_t set_, old_;
  std::atomic<bool> done_{false}, interrupted_{false};
  std::thread thread_;
};

// Prompt-processing progress on a terminal (stderr): done/total, rate and time left, redrawn at
// most 4 times a second while a prompt of more than one prefill chunk is evaluated, erased after.
class PrefillProgress {
 public:
  explicit PrefillProgress(bool enabled) : enabled_(enabled) {}
  void Update(int64_t done, int64_t total) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total && shown_ && now - last_ < std::chrono::milliseconds(250)) return;
    if (done >= total && !shown_) return;  // one pass: nothing worth a line
    last_ = now;
    const double s = std::chrono::duration<double>(now - t0_).count();
    const double rate = s > 0 ? static_cast<double>(done) / s : 0.0;
    const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0.0;
    std::fprintf(stderr, "\r\033[Kprompt %lld/%lld tokens (%.0f%%), %.1f tokens/s, ETA %.0f s",
                 static_cast<long long>(done), static_cast<long long>(total),
                 100.0 * static_cast<double>(done) / static_cast<double>(total), rate, eta);
    shown_ = true;
    if (done >= total) Clear();
  }
  void Clear() {
    if (!shown_) return;
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    shown_ = false;
    enabled_ = false;
  }

 private:
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now(), last_;
};

std::string ReadFile(const std::string& path, const char* what = "prompt") {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail("cannot read {} file '{}'", what, path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Run(const RunFlags& f) {
  if (f.prompt_given && f.prompt.empty()) Fail("the prompt (-p) is empty; give some text");
  if (f.prompt.empty() == f.file.empty()) Fail("give exactly one of -p TEXT or -f FILE");
  const std::string text = f.file.empty() ? f.prompt : ReadFile(f.file);
  if (text.empty()) Fail("the prompt file '{}' is empty", f.file);
  // A bad decoding flag fails before the model loads, as in serve: the flags over valid stand-ins
  // for the model's defaults (applied again over the real ones below).
  f.decode.Apply(decode::DecodeParams{});
  // So does a bad grammar or schema: it is parsed (and a schema compiled) before the model loads.
  std::string gbnf;
  if (!f.grammar_file.empty()) {
    gbnf = ReadFile(f.grammar_file, "grammar");
    grammar::ParseGbnf(gbnf);
  } else if (!f.json_schema_file.empty()) {
    gbnf = grammar::JsonSchemaToGbnf(std::string_view(ReadFile(f.json_schema_file, "schema")));
  }
  const GgmlType kv_type = f.model.KvType(f.notes.get());
  f.model.AddNotes(*f.notes);
  f.notes->Print(f.model.MakeLogger());
  InterruptWatch interrupt;  // before the engine starts its threads: they inherit the mask
  auto engine = engine::Engine::Load(f.model.ToEngineOptions());
  const Logger& log = engine->logger();
  const int64_t n_train = engine->model().hparams().n_ctx_train;
  // -c 0 (the default): the training context, at most 4096, as serve's per-slot default; only a
  // context the user asked for can exceed the training one (and get the warning).
  const int64_t ctx_size = f.model.n_ctx > 0 ? f.model.n_ctx
                           : n_train > 0     ? std::min<int64_t>(4096, n_train)
                                             : 4096;
  if (n_train > 0 && ctx_size > n_train) {
    log.Warn(
        "-c {} exceeds the {} tokens this model was trained on: answers past {} tokens may "
        "degrade",
        ctx_size, n_train, n_train);
  }
  decode::DecodeParams params = f.decode.Apply(engine->DefaultDecodeParams());
  if (const std::string note = decode::DraftCapNote(params); !note.empty()) {
    log.Info("{}", note);
  }
  if (f.model.batch) {
    if (*f.model.batch < 1) Fail("-b must be >= 1 (got {})", *f.model.batch);
    params.prefill_chunk = *f.model.batch;
  }
  std::vector<int32_t> prompt;
  if (f.chat) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
    messages.push_back({{"role", "user"}, {"content", text}});
    nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
    if (f.no_think) kwargs["enable_thinking"] = false;
    auto cp = engine->EncodeChat(messages, nlohmann::ordered_json::array(), kwargs);
    prompt = std::move(cp.tokens);
    params.think_open = cp.think_open;
  } else {
    if (!f.system.empty() || f.no_think) Fail("--system and --no-think need --chat");
    prompt = engine->tokenizer().Encode(text, /*parse_special=*/false);
    if (prompt.empty()) Fail("the prompt encodes to no tokens");
    params.think_open = engine->ThinkOpen(prompt);
  }
  if (!gbnf.empty()) {
    grammar::GrammarLimits limits;  // a generated grammar may be larger and nest deeper
    if (!f.json_schema_file.empty()) {
      limits.max_text_bytes = grammar::JsonSchemaOptions{}.max_grammar_bytes;
      limits.max_nesting = 256;
    }
    params.grammar = engine->CompileGrammar(gbnf, params.think_open, limits);
  }
  const int64_t n_ctx =
      std::min<int64_t>(ctx_size, static_cast<int64_t>(prompt.size()) + params.max_tokens);
  if (static_cast<int64_t>(prompt.size()) >= ctx_size) {
    Fail("the prompt has {} tokens; the context (-c) holds {}", prompt.size(), ctx_size);
  }
  auto state = engine->NewState(n_ctx, kv_type);
  log.Info("model {} loaded in {:.2f} s; {} prompt tokens; mode {}", engine->model_name(),
           engine->load_seconds(), prompt.size(), decode::ModeName(params.mode));

  const bool tty = isatty(STDOUT_FILENO);
  const auto& sp = engine->tokenizer().special();
  bool in_think = params.think_open;
  tokenizer::StreamDecoder dec(engine->tokenizer());
  auto set_think = [&](bool on) {
    if (tty) std::fputs(on ? "\033[2m" : "\033[0m", stdout);
  };
  if (in_think) {
    if (tty) {
      set_think(true);
    } else {
      std::fputs("<think>\n", stdout);  // the template opened it; mark where reasoning starts
    }
  }
  auto sink = [&](int32_t tok) {
    std::string piece = dec.Feed(tok);
    if (sp.think && tok == *sp.think && !in_think) {
      in_think = true;
      set_think(true);
      if (tty) piece.clear();  // dimming marks the reasoning; the tag itself is not shown
    } else if (sp.think_end && tok == *sp.think_end && in_think) {
      in_think = false;
      if (!tty) std::fputs(piece.c_str(), stdout);
      piece.clear();
      set_think(false);
    }
    std::fputs(piece.c_str(), stdout);
    std::fflush(stdout);
    return true;
  };
  PrefillProgress progress(isatty(STDERR_FILENO) && log.Enabled(LogLevel::kInfo));
  engine::RunHooks hooks;
  hooks.on_prefill = [&](int64_t done, int64_t total) { progress.Update(done, total); };
  hooks.stop = [&] { return interrupt.interrupted(); };
  decode::Generation gen =
      engine::RunGeneration(*engine, *state, std::move(prompt), params, sink, hooks);
  progress.Clear();
  std::fputs(dec.Flush().c_str(), stdout);
  if (in_think) set_think(false);
  std::fputs("\n", stdout);
  std::fflush(stdout);

  const decode::DecodeStats& st = gen.stats();
  const bool interrupted = interrupt.interrupted();
  const double gen_seconds = st.ar_seconds + st.denoise_seconds + st.commit_seconds;
  const double prompt_tps = st.prefill_seconds > 0 ? st.prompt_tokens / st.prefill_seconds : 0.0;
  const double gen_tps = gen_seconds > 0 ? st.generated / gen_seconds : 0.0;
  // The summary is an info line: --log-level warn and above keep stderr quiet unless --stats asks.
  if (f.stats || f.model.MakeLogger().Enabled(LogLevel::kInfo)) {
    std::fprintf(stderr,
                 "crossword: load %.2f s | prompt %lld tokens, %.1f tokens/s | generated %lld "
                 "tokens, %.1f tokens/s "
                 "(%s) | finish: %s\n",
                 engine->load_seconds(), static_cast<long long>(st.prompt_tokens), prompt_tps,
                 static_cast<long long>(st.generated), gen_tps,
                 std::string(decode::ModeName(params.mode)).c_str(),
                 std::string(decode::FinishReasonName(gen.finish_reason())).c_str());
  }
  if (f.stats) {
    // Each line names the pass kinds of this run's mode: AR steps, diffusion's denoise and commit
    // passes, or spec's draft and verify passes (one mode per run: the others are always 0).
    const bool ar = params.mode == decode::Mode::kAr, spec = params.mode == decode::Mode::kSpec;
    const char* first_kind = spec ? "draft" : "denoise";
    const char* second_kind = spec ? "verify" : "commit";
    // "prefill P, <kind> V, ..." with one value per kind of the mode, each formatted with
    // `value_spec`.
    auto kinds = [&](auto prefill, auto ar_v, auto first, auto second, const char* value_spec) {
      // A kind that ran no pass has no time or expert count: "-".
      auto value = [&]<class V>(V v) {
        if constexpr (std::is_same_v<V, std::optional<double>>) {
          return v ? fmt::format(fmt::runtime(value_spec), *v) : std::string("-");
        } else {
          return fmt::format(fmt::runtime(value_spec), v);
        }
      };
      if (ar) return fmt::format("prefill {}, ar {}", value(prefill), value(ar_v));
      return fmt::format("prefill {}, {} {}, {} {}", value(prefill), first_kind, value(first),
                         second_kind, value(second));
    };
    std::fprintf(
        stderr, "crossword: passes: %s | tokens per pass %.2f\n",
        kinds(st.prefill_passes, st.ar_passes, st.denoise_passes, st.commit_passes, "{}").c_str(),
        st.tokens_per_pass());
    if (params.fuse_passes) {
      std::fprintf(stderr,
                   "crossword: fused passes %lld, their tail used %lld (a %s pass saved each)\n",
                   static_cast<long long>(st.fused_passes), static_cast<long long>(st.fused_hits),
                   first_kind);
    }
    auto ms = [](double s, int64_t n) {
      return n > 0 ? std::optional<double>(1000.0 * s / static_cast<double>(n)) : std::nullopt;
    };
    if (params.grammar) {
      std::fprintf(stderr, "crossword: grammar: %lld masks, %.3f ms per mask\n",
                   static_cast<long long>(st.grammar_masks),
                   ms(st.grammar_seconds, st.grammar_masks).value_or(0.0));
    }
    std::fprintf(stderr, "crossword: ms per pass: %s\n",
                 kinds(ms(st.prefill_seconds, st.prefill_passes), ms(st.ar_seconds, st.ar_passes),
                       ms(st.denoise_seconds, st.denoise_passes),
                       ms(st.commit_seconds, st.commit_passes), "{:.2f}")
                     .c_str());
    auto per = [](double sum, int64_t n) {
      return n > 0 ? std::optional<double>(sum / static_cast<double>(n)) : std::nullopt;
    };
    std::fprintf(stderr,
                 "crossword: distinct experts per MoE layer per pass (U): %s (of %d, top-%d)\n",
                 kinds(per(st.prefill_experts, st.prefill_passes), per(st.ar_experts, st.ar_passes),
                       per(st.denoise_experts, st.denoise_passes),
                       per(st.commit_experts, st.commit_passes), "{:.1f}")
                     .c_str(),
                 engine->model().hparams().n_expert, engine->model().hparams().n_expert_used);
    if (params.mode == decode::Mode::kSpec) {
      if (params.draft_skip_ffn != 0) {
        std::fprintf(
            stderr, "crossword: draft passes skip the FFN blocks of layers %s%s\n",
            fmt::format("{}", fmt::join(model::MaskLayers(params.draft_skip_ffn), ",")).c_str(),
            engine->executor().skips_ffn() ? "" : " (not on this executor: every layer)");
      }
      std::string hist;
      for (size_t k = 0; k < st.accepted_hist.size(); ++k) {
        if (st.accepted_hist[k]) hist += fmt::format(" {}:{}", k, st.accepted_hist[k]);
      }
      std::fprintf(
          stderr,
          "crossword: spec rounds %lld, mean accepted drafts %.2f, verified tokens per round %.2f, "
          "histogram (accepted:rounds)%s\n",
          static_cast<long long>(st.rounds), st.mean_accepted(),
          st.rounds ? static_cast<double>(st.verify_rows) / static_cast<double>(st.rounds) : 0.0,
          hist.c_str());
      std::fprintf(
          stderr,
          "crossword: verify logit rows %lld of %lld verified tokens (%lld further "
          "chunks); drafts cut at a drafted end of generation: %lld\n",
          static_cast<long long>(st.verify_logit_rows), static_cast<long long>(st.verify_rows),
          static_cast<long long>(st.verify_more_calls), static_cast<long long>(st.draft_eog_cuts));
    }
  }
  if (interrupted) throw CLI::RuntimeError(130);  // the shell's code for SIGINT
}

}  // namespace

void RegisterRunCommand(CLI::App& app) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt, streaming it to stdout");
  flags->model.n_ctx = 0;  // the model's training context, at most 4096 (llama.cpp's -c 0)
  flags->model.Add(cmd, kRun, /*model_required=*/false);
  flags->decode.Add(cmd, kRun);
  AddNoEffectFlags(cmd, kRun, flags->notes);
  auto* p = cmd->add_option("-p,--prompt", flags->prompt, "prompt text");
  cmd->add_option("-f,--file", flags->file, "read the prompt from a file");
  cmd->add_flag("--chat", flags->chat, "wrap the prompt in the model's chat template");
  cmd->add_option("--system,--system-prompt", flags->system,
                  "system message (with --chat; llama-cli's -sys)");
  cmd->add_flag("--no-think", flags->no_think, "render the template with enable_thinking = false");
  auto* g = cmd->add_option("--grammar-file", flags->grammar_file,
                            "constrain the answer to a GBNF grammar (llama.cpp's syntax)");
  auto* j = cmd->add_option("--json-schema,--json-schema-file", flags->json_schema_file,
                            "constrain the answer to JSON valid under the JSON Schema in this file "
                            "(docs/structured-output.md: the supported subset)");
  g->excludes(j);
  cmd->add_flag("--stats", flags->stats,
                "print forward passes, tokens per pass, acceptance, time per pass type");
  cmd->callback([flags, p] {
    flags->prompt_given = p->count() > 0;
    if (!flags->model.ListDevicesIfAsked()) Run(*flags);
  });
}

}  // namespace crossword::cli
