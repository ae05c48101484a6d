// `crossword tokenize` and `crossword tokenizer {convert-hf,bench}` (see tokenizer_commands.h).
#include "tokenizer/tokenizer_commands.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "gguf/gguf.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace crossword::tokenizer {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  Check(in.good(), "cannot open '{}' for reading", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A model path is a GGUF file, or (handy for checks) a tokenizer.json; none: the default GGUF
// bytes (the binary's embedded model).
Tokenizer LoadTokenizer(const std::string& path, std::span<const std::byte> default_model) {
  if (path.empty()) {
    Check(!default_model.empty(),
          "no model: give -m MODEL.gguf (this build has no embedded model)");
    return Tokenizer::FromGguf(gguf::File::Parse(default_model));
  }
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    return Tokenizer::FromVocabulary(VocabularyFromHfFiles(path, ""));
  }
  gguf::File file = gguf::File::Open(path);
  return Tokenizer::FromGguf(file);
}

struct TokenizeOptions {
  std::string model, prompt, file;
  std::span<const std::byte> default_model;
  bool special = false, pieces = false;
};

void RunTokenize(const TokenizeOptions& o) {
  Tokenizer tok = LoadTokenizer(o.model, o.default_model);
  const std::string text = o.file.empty() ? o.prompt : ReadAll(o.file);
  std::vector<int32_t> ids = tok.Encode(text, o.special);
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ", ";
    if (o.pieces) {
      std::string piece;
      AppendUtf8Lossy(tok.TokenBytes(ids[i]), piece);
      out += fmt::format("[{}, {}]", ids[i], nlohmann::json(piece).dump());
    } else {
      out += std::to_string(ids[i]);
    }
  }
  out += "]\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
}

struct ConvertOptions {
  std::string input, config, output, arch, name = "tokenizer";
  int64_t pad_to = 0;
};

void RunConvert(const ConvertOptions& o) {
  HfImportOptions options;
  options.pad_to = o.pad_to;
  Vocabulary vocab = VocabularyFromHfFiles(o.input, o.config, options);
  std::string arch = o.arch.empty() ? vocab.pre : o.arch;
  WriteVocabularyGguf(vocab, o.output, arch, o.name);
  std::fprintf(stderr, "crossword: wrote %s: %zu tokens, %zu merges, pre-tokenizer %s\n",
               o.output.c_str(), vocab.tokens.size(), vocab.merges.size(), vocab.pre.c_str());
}

struct BenchOptions {
  std::string model, file;
  int repeat = 5;
  std::span<const std::byte> default_model;
};

void RunBench(const BenchOptions& o) {
  Tokenizer tok = LoadTokenizer(o.model, o.default_model);
  const std::string text = ReadAll(o.file);
  Check(!text.empty(), "bench: '{}' is empty", o.file);
  // Encode line-sized documents like a server does, one thread.
  std::vector<std::string_view> docs;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find("\n\n", pos);
    end = end == std::string::npos ? text.size() : end + 2;
    docs.push_back(std::string_view(text).substr(pos, end - pos));
    pos = end;
  }
  // Wall and process CPU time per pass (CPU time stays meaningful on a shared, busy machine).
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  size_t n_tokens = 0;
  auto pass = [&] {
    auto start = std::chrono::steady_clock::now();
    double cpu0 = cpu_now();
    size_t n = 0;
    for (std::string_view d : docs) n += tok.Encode(d, false).size();
    n_tokens = n;
    double cpu = cpu_now() - cpu0;
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::pair(wall, cpu);
  };
  auto [cold_wall, cold_cpu] = pass();
  std::vector<double> walls, cpus;
  for (int i = 0; i < o.repeat; ++i) {
    auto [w, c] = pass();
    walls.push_back(w);
    cpus.push_back(c);
  }
  auto median = [](std::vector<double> v, double fallback) {
    if (v.empty()) return fallback;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double wall = median(walls, cold_wall), cpu = median(cpus, cold_cpu);
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf(
      "{\"engine\": \"crossword\", \"bytes\": %zu, \"docs\": %zu, \"tokens\": %zu, "
      "\"cold_mb_per_s\": %.3f, \"mb_per_s\": %.3f, \"cpu_mb_per_s\": %.3f, "
      "\"median_wall_s\": %.4f, \"median_cpu_s\": %.4f, \"jit\": %s}\n",
      text.size(), docs.size(), n_tokens, mb / cold_wall, mb / wall, mb / cpu, wall, cpu,
      tok.regex_jit() ? "true" : "false");
}

}  // namespace

void RegisterTokenizerCommands(CLI::App& app, std::span<const std::byte> default_model) {
  auto tokenize_opts = std::make_shared<TokenizeOptions>();
  tokenize_opts->default_model = default_model;
  CLI::App* tokenize = app.add_subcommand("tokenize", "print the token ids of a text as JSON");
  tokenize->add_option(
      "-m,--model", tokenize_opts->model,
      "GGUF model or vocabulary, or a tokenizer.json (default: the embedded model)");
  auto* p = tokenize->add_option("-p,--prompt", tokenize_opts->prompt, "Text to tokenize");
  auto* f = tokenize->add_option("-f,--file", tokenize_opts->file, "File whose bytes to tokenize");
  p->excludes(f);
  f->excludes(p);
  tokenize->add_flag("--special", tokenize_opts->special,
                     "Match control tokens written in the text (e.g. <|im_end|>)");
  tokenize->add_flag("--pieces", tokenize_opts->pieces, "Print [id, text] pairs");
  tokenize->callback([tokenize_opts, p, f] {
    Check(p->count() + f->count() == 1, "tokenize: give exactly one of -p TEXT or -f FILE");
    RunTokenize(*tokenize_opts);
  });

  CLI::App* group = app.add_subcommand(
      "tokenizer", "tokenizer tools: convert a Hugging Face tokenizer.json, time the encoder");
  group->require_subcommand(1);
  auto convert_opts = std::make_shared<ConvertOptions>();
  CLI::App* convert = group->add_subcommand(
      "convert-hf", "Convert a Hugging Face tokenizer.json into a vocabulary-only GGUF");
  convert->add_option("tokenizer_json", convert_opts->input, "tokenizer.json")->required();
  convert->add_option("--config", convert_opts->config,
                      "tokenizer_config.json (eos/pad/bos tokens, chat template)");
  convert->add_option("-o,--output", convert_opts->output, "Output .gguf")->required();
  convert->add_option("--pad-to", convert_opts->pad_to, "Pad the vocabulary to N ids");
  convert->add_option("--arch", convert_opts->arch,
                      "general.architecture (default: the pre-tokenizer name)");
  convert->add_option("--name", convert_opts->name, "general.name");
  convert->callback([convert_opts] { RunConvert(*convert_opts); });

  auto bench_opts = std::make_shared<BenchOptions>();
  bench_opts->default_model = default_model;
  CLI::App* bench = group->add_subcommand("bench", "Single-thread encode speed on a text file");
  bench->add_option("-m,--model", bench_opts->model,
                    "GGUF or tokenizer.json (default: the embedded model)");
  bench->add_option("-f,--file", bench_opts->file, "Text file")->required();
  bench->add_option("--repeat", bench_opts->repeat, "Timed passes after the cold one");
  bench->callback([bench_opts] { RunBench(*bench_opts); });
}

}  // namespace crossword::tokenizer
