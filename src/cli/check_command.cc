// `crossword check`: known-answer questions in every decoding mode, so a broken file or kernel is
// caught before anyone measures its speed (a model that prints garbage still has a tokens/s).
#include <algorithm>
#include <cctype>
#include <cstdio>

#include "base/error.h"
#include "chat/output_parser.h"
#include "cli/commands.h"
#include "cli/common.h"

namespace crossword::cli {
namespace {

struct CheckFlags {
  ModelFlags model;
  std::vector<std::string> modes = {"ar", "diffusion", "spec"};
  int64_t n_predict = 64;
  bool think = false;
  bool verbose = false;
};

struct Question {
  std::string question;
  std::string answer;  // expected substring of the answer (case-insensitive)
};

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The file's own questions (metadata key crossword.selfcheck: a JSON array of
// {"question", "answer"}), else the published known answer for a full-vocabulary Clover/Qwen3.5
// file.
std::vector<Question> Questions(const engine::Engine& e) {
  std::vector<Question> qs;
  if (auto src = e.model().file().GetString("crossword.selfcheck")) {
    nlohmann::json j = nlohmann::json::parse(*src, nullptr, /*allow_exceptions=*/false);
    if (!j.is_array())
      Fail("crossword.selfcheck must be a JSON array of {{\"question\", \"answer\"}}");
    for (const auto& q : j) {
      if (!q.is_object() || !q.contains("question") || !q.contains("answer")) {
        Fail("crossword.selfcheck entries need \"question\" and \"answer\"");
      }
      qs.push_back({q["question"].get<std::string>(), q["answer"].get<std::string>()});
    }
    return qs;
  }
  // A synth file has the full vocabulary but random weights: no question has a right answer.
  if (IsSynthFile(e)) {
    Fail(
        "{} is a crossword synth file (random weights): it has no known answers, so there is "
        "nothing to check",
        e.model_name());
  }
  if (e.model().hparams().n_vocab >= 248000) {  // the Qwen3.5 vocabulary (clover-facts.md)
    qs.push_back({"What is the capital of Australia? One word.", "Canberra"});
    return qs;
  }
  Fail(
      "{} has no known-answer questions (no crossword.selfcheck key and not a full-vocabulary "
      "Clover file)",
      e.model_name());
}

void RunCheck(const CheckFlags& f) {
  // A bad --modes entry fails before the model loads.
  for (const std::string& mode_name : f.modes) decode::ParseMode(mode_name, "--modes");
  auto engine = engine::Engine::Load(f.model.ToEngineOptions());
  const std::vector<Question> qs = Questions(*engine);
  int failures = 0, total = 0;
  for (const std::string& mode_name : f.modes) {
    decode::DecodeParams params = engine->DefaultDecodeParams();
    params.mode = decode::ParseMode(mode_name);
    params.max_tokens = f.n_predict;
    // Plain greedy decoding: the answer then depends on the logits alone (no penalties).
    params.sampling = decode::SamplingParams{};
    int right = 0;
    for (const Question& q : qs) {
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      messages.push_back({{"role", "user"}, {"content", q.question}});
      nlohmann::ordered_json kwargs = {{"enable_thinking", f.think}};
      auto cp = engine->EncodeChat(messages, nlohmann::ordered_json::array(), kwargs);
      params.think_open = cp.think_open;
      auto state = engine->NewState(static_cast<int64_t>(cp.tokens.size()) + f.n_predict + 8,
                                    f.model.KvType());
      decode::Generation gen = engine::RunGeneration(*engine, *state, cp.tokens, params, nullptr);
      chat::ParseOptions po;
      po.thinking_opened = cp.think_open;
      const chat::ParsedOutput out =
          chat::ParseOutput(engine->tokenizer().Decode(gen.output(), false), po);
      const bool ok = Lower(out.content).find(Lower(q.answer)) != std::string::npos;
      right += ok;
      ++total;
      if (!ok || f.verbose) {
        std::printf("  [%s] %s %s -> %s (expected %s)\n", mode_name.c_str(), ok ? "ok  " : "FAIL",
                    q.question.c_str(), out.content.c_str(), q.answer.c_str());
      }
    }
    failures += static_cast<int>(qs.size()) - right;
    std::printf("%-9s %d/%zu known answers right\n", mode_name.c_str(), right, qs.size());
  }
  std::fflush(stdout);
  if (failures > 0) {
    Fail(
        "check failed: {} of {} known-answer questions answered wrongly; this file or build gives "
        "wrong "
        "results (do not trust its speed figures)",
        failures, total);
  }
}

}  // namespace

void RegisterCheckCommand(CLI::App& app) {
  auto flags = std::make_shared<CheckFlags>();
  CLI::App* cmd = app.add_subcommand(
      "check", "ask known-answer questions in each decoding mode; fail on a wrong answer");
  flags->model.Add(cmd, kTool, /*model_required=*/false);
  cmd->add_option("--modes", flags->modes, "modes to check")->capture_default_str();
  cmd->add_option("-n,--n-predict", flags->n_predict, "answer tokens at most")
      ->capture_default_str();
  cmd->add_flag("--think", flags->think, "let the model think first (enable_thinking = true)");
  cmd->add_flag("-v,--verbose", flags->verbose, "print every answer");
  cmd->callback([flags] {
    if (!flags->model.ListDevicesIfAsked()) RunCheck(*flags);
  });
}

}  // namespace crossword::cli
