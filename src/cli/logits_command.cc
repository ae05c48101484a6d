// `crossword logits`: top-K log-softmax per position as JSON lines (for checking a file or an
// engine against an independent implementation).
#include <cmath>
#include <cstdio>
#include <limits>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/common.h"

namespace crossword::cli {
namespace {

struct LogitsFlags {
  ModelFlags model;
  std::string prompt, tokens;
  int top = 10;
  bool all = false;
  int64_t batch = 512;
  int64_t decode_from = -1;
};

std::vector<int32_t> ParseIds(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string item = s.substr(i, j - i);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > std::numeric_limits<int32_t>::max()) {
      Fail("--tokens: '{}' is not a token id (expected comma-separated integers)", item);
    }
    ids.push_back(static_cast<int32_t>(v));
    i = j + 1;
  }
  return ids;
}

void PrintRow(int64_t pos, int32_t token, std::span<const float> row, int top) {
  float mx = -std::numeric_limits<float>::infinity();
  for (float v : row) mx = std::max(mx, v);
  double sum = 0.0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  std::vector<int32_t> idx(row.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
  const size_t k = std::min<size_t>(top, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  std::string line = fmt::format("{{\"pos\":{},\"token\":{},\"top\":[", pos, token);
  for (size_t i = 0; i < k; ++i) {
    line += fmt::format("{}[{},{:.7g}]", i ? "," : "", idx[i], row[idx[i]] - lse);
  }
  line += "]}\n";
  std::fputs(line.c_str(), stdout);
}

void RunLogits(const LogitsFlags& f) {
  if (f.prompt.empty() == f.tokens.empty()) Fail("give exactly one of -p TEXT or --tokens 1,2,3");
  if (f.top < 1) Fail("--top must be >= 1");
  if (f.batch < 1) Fail("--batch must be >= 1");
  auto engine = engine::Engine::Load(f.model.ToEngineOptions());
  const std::vector<int32_t> ids =
      f.tokens.empty() ? engine->tokenizer().Encode(f.prompt, false) : ParseIds(f.tokens);
  if (ids.empty()) Fail("no tokens to evaluate");
  const int64_t n = static_cast<int64_t>(ids.size());
  auto state = engine->NewState(std::max<int64_t>(f.model.n_ctx, n), f.model.KvType());
  model::ContextOptions co;
  co.max_tokens = f.batch;
  co.max_logit_rows = f.all ? f.batch : 1;
  std::unique_ptr<model::ForwardContext> ctx = engine->executor().NewContext(co);
  const int64_t n_vocab = engine->model().hparams().n_vocab;
  int64_t pos = 0;
  while (pos < n) {
    // Positions >= decode_from go one token per pass (the decode path); the rest in batches.
    const int64_t chunk =
        (f.decode_from >= 0 && pos >= f.decode_from)
            ? 1
            : std::min(f.batch, (f.decode_from >= 0 ? std::max(f.decode_from, pos + 1) : n) - pos);
    const int64_t len = std::min(chunk, n - pos);
    model::SequenceInput in;
    in.state = state.get();
    in.tokens = std::span<const int32_t>(ids).subspan(pos, len);
    in.logits = f.all ? model::LogitRows::kAll
                      : (pos + len == n ? model::LogitRows::kLast : model::LogitRows::kNone);
    engine->executor().Forward({&in, 1}, *ctx);
    std::span<const float> lg = ctx->logits(0);
    const int64_t rows = ctx->n_logit_rows(0);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t p = f.all ? pos + r : n - 1;
      PrintRow(p, ids[p], lg.subspan(r * n_vocab, n_vocab), f.top);
    }
    pos += len;
  }
}

}  // namespace

void RegisterLogitsCommand(CLI::App& app) {
  auto flags = std::make_shared<LogitsFlags>();
  CLI::App* cmd =
      app.add_subcommand("logits", "print top-K log-probabilities per position as JSON lines");
  flags->model.Add(cmd, kTool, /*model_required=*/false);
  cmd->add_option("-p,--prompt", flags->prompt,
                  "text to evaluate (tokenized without special tokens)");
  cmd->add_option("--tokens", flags->tokens, "comma-separated token ids to evaluate");
  cmd->add_option("--top", flags->top, "entries per position")->capture_default_str();
  cmd->add_flag("--all", flags->all, "print every position (default: the last one)");
  cmd->add_option("--batch", flags->batch, "tokens per forward pass")->capture_default_str();
  cmd->add_option("--decode-from", flags->decode_from,
                  "evaluate positions from here one token per pass");
  cmd->callback([flags] {
    if (!flags->model.ListDevicesIfAsked()) RunLogits(*flags);
  });
}

}  // namespace crossword::cli
