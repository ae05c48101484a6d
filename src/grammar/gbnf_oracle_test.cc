// Differential test against llama.cpp's GBNF engine (npm node-llama-cpp@3.21.1, driven by
// tests/oracles/gbnf_oracle.mjs): on llama.cpp's own example grammars (grammars/*.gbnf, read
// from the installed package) and on grammars written here for each syntax feature, both
// engines must agree whether each string is a complete match, and must both refuse the
// malformed and left-recursive grammars. The strings are written by hand, sampled from our
// matcher (random walks over allowed bytes) and mutated (a character deleted, inserted or
// doubled), so roughly half are not in the language.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "base/utf8.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace crossword::grammar {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct Case {
  std::string name;
  std::string grammar;
  std::vector<std::string> strings;
  bool malformed = false;  // both must refuse the grammar
};

std::shared_ptr<const TokenVocabulary> Bytes() {
  static const auto v = [] {
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
    return std::make_shared<const TokenVocabulary>(std::move(t), std::span<const int32_t>(),
                                                   std::span<const int32_t>());
  }();
  return v;
}

std::shared_ptr<const CompiledGrammar> Compile(const std::string& text) {
  GrammarLimits limits;
  limits.max_text_bytes = 4 << 20;
  limits.max_nesting = 256;
  return std::make_shared<const CompiledGrammar>(CompileGrammar(ParseGbnf(text, limits), limits),
                                                 Bytes());
}

bool Ours(const std::shared_ptr<const CompiledGrammar>& g, const std::string& s) {
  Matcher m(g);
  return m.AcceptBytes(s) && m.CanEnd();
}

// A random walk over allowed bytes, ending (when it may) with probability 1/4 per step.
std::string Sample(const std::shared_ptr<const CompiledGrammar>& g, std::mt19937& rng,
                   size_t max_len) {
  Matcher m(g);
  std::vector<uint64_t> mask(m.mask_words());
  std::string s;
  while (s.size() < max_len) {
    if (m.CanEnd() && rng() % 4 == 0) break;
    m.FillMask(mask);
    std::vector<int> allowed;
    for (int b = 1; b < 256; ++b) {  // no NUL: llama.cpp reads C strings
      if (MaskTest(mask, b)) allowed.push_back(b);
    }
    if (allowed.empty()) break;
    // Favour ASCII so that samples stay readable and reach the end more often.
    std::vector<int> ascii;
    for (int b : allowed) {
      if (b >= 0x20 && b < 0x7F) ascii.push_back(b);
    }
    const auto& pool = !ascii.empty() && rng() % 4 != 0 ? ascii : allowed;
    const int b = pool[rng() % pool.size()];
    m.Accept(b);
    s.push_back(static_cast<char>(b));
  }
  // Finish a multi-byte character so the string stays UTF-8.
  while (!s.empty()) {
    size_t i = 0;
    bool ok = true;
    while (i < s.size()) {
      char32_t cp;
      const int n = DecodeUtf8At(s, i, cp);
      if (n == 0) {
        ok = false;
        break;
      }
      i += static_cast<size_t>(n);
    }
    if (ok) break;
    s.pop_back();
  }
  return s;
}

std::vector<size_t> CharStarts(const std::string& s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size();) {
    starts.push_back(i);
    char32_t cp;
    const int n = DecodeUtf8At(s, i, cp);
    i += n > 0 ? static_cast<size_t>(n) : 1;
  }
  starts.push_back(s.size());
  return starts;
}

std::string Mutate(const std::string& s, std::mt19937& rng) {
  const auto starts = CharStarts(s);
  const size_t k = rng() % starts.size();
  const size_t at = starts[k];
  const size_t len = k + 1 < starts.size() ? starts[k + 1] - at : 0;
  static const std::string kPool = "a0 \"{}[],:.-+()xyz\n\\";
  switch (rng() % 3) {
    case 0:
      return s.substr(0, at) + s.substr(at + len);
    case 1:
      return s.substr(0, at) + kPool[rng() % kPool.size()] + s.substr(at);
    default:
      return s.substr(0, at) + s.substr(at, len) + s.substr(at);
  }
}

std::vector<Case> InlineCases() {
  std::vector<Case> c;
  c.push_back({"repetition",
               "root ::= \"a\"{2,3} \"b\"{2} \"c\"{1,} (\"d\" \"e\"?){0,2}\n",
               {"aabbc", "aaabbccdde", "abbc", "aabbbc", "aabbcdedd", "aabbcdede", ""}});
  c.push_back({"classes",
               "root ::= [a-zA-Z_] [a-zA-Z0-9_\\-]* \" \" [^ \\t\\n]+ \"\\n\"?\n",
               {"x1 y", "_a-b 123\n", "1x y", "x  y", "x y\n\n", "é y"}});
  c.push_back({"unicode",
               "root ::= [α-ω]+ \"·\" [\\u4e00-\\u9fff]{1,3} .\n",
               {"αβ·中文!", "ω·一二三😀", "ω·一二三四😀", "a·中!", "α·中", "αβγ·字\n"}});
  c.push_back({"groups-and-comments",
               "# a comment line\nroot ::= (\n  \"ab\" | # first\n  \"a\" (\"c\" | \"d\")+\n) "
               "tail\ntail ::= \"!\" |\n  \"?\" \"?\"\n",
               {"ab!", "acdc??", "a!", "ab??", "abc!", "acd?"}});
  c.push_back({"escapes",
               "root ::= \"\\x41\\u00e9\\U0001F600\\\"\\\\\\t\" [\\[\\]\\-]\n",
               {"Aé😀\"\\\t[", "Aé😀\"\\\t-", "Aé😀\"\\\t]", "Aé😀\"\\ -", "Ae😀\"\\\t["}});
  c.push_back({"balanced",
               "root ::= (\"(\" root \")\")*\n",
               {"", "()", "(())()", "(()", "())(", "((()))(())"}});
  c.push_back({"nullable",
               "root ::= a b\na ::= \"x\"?\nb ::= \"y\"* c\nc ::= | \"z\"\n",
               {"", "x", "xyyz", "yz", "zz", "xzy"}});
  c.push_back({"any", "root ::= .{3} \"!\"\n", {"abc!", "日本語!", "ab!", "abcd!", "\n\t !"}});
  // Our JSON Schema compiler's output must mean the same to llama.cpp.
  for (const char* schema :
       {R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
           "age": {"type": "integer", "minimum": 18, "maximum": 120}, "tags": {"type": "array",
           "items": {"enum": ["a", "b\"c"]}}}, "required": ["name"], "additionalProperties": false})",
        R"({"type": "number", "exclusiveMinimum": -2.5, "maximum": 10.25})",
        R"({"type": "string", "format": "date-time"})",
        R"({"type": "object", "properties": {"ab": {"type": "boolean"}}, "minProperties": 1})"}) {
    c.push_back({"schema", JsonSchemaToGbnf(std::string_view(schema)), {}});
  }
  c.back().strings = {"{\"ab\":true}", "{\"a\":null}", "{}", "{\"ab\":true,\"c\":1}"};
  // Malformed or left-recursive: both engines refuse them.
  for (const char* bad :
       {"root ::= \"a\n", "root ::= [a-\n", "root ::= (\"a\"\n", "root ::= x\n", "foo ::= \"a\"\n",
        "root ::= root \"a\" | \"b\"\n", "root ::= a\na ::= \"x\"? root\n",
        "root ::= \"a\" ::= \"b\"\n", "root ::= \"\\q\"\n", "root ::= * \"a\"\n"}) {
    Case m{"malformed", bad, {}, true};
    c.push_back(m);
  }
  return c;
}

// Runs a shell command; returns its exit status and stdout.
int Shell(const std::string& cmd, std::string& out) {
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  return ::pclose(p);
}

TEST(GbnfOracle, AgreesWithLlamaCpp) {
  const std::string oracle = std::string("node '") + CROSSWORD_SOURCE_DIR +
                             "/tests/oracles/gbnf_oracle.mjs' --oracles '" + CROSSWORD_ORACLE_DIR +
                             "'";
  std::string dir;
  ASSERT_EQ(Shell(oracle + " --grammars-dir", dir), 0)
      << "node-llama-cpp is not installed (scripts/setup-oracles)";
  dir.erase(dir.find_last_not_of('\n') + 1);
  std::vector<Case> cases;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".gbnf") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 8u) << "llama.cpp's grammars/*.gbnf not found in " << dir;
  for (const auto& f : files) {
    std::ifstream in(f);
    std::stringstream ss;
    ss << in.rdbuf();
    cases.push_back({f.filename().string(), ss.str(), {}});
  }
  for (Case& c : InlineCases()) cases.push_back(std::move(c));
  // Strings: hand-written ones plus samples and mutations from our matcher.
  std::mt19937 rng(11);
  int n_strings = 0;
  for (Case& c : cases) {
    if (c.malformed) continue;
    auto g = Compile(c.grammar);
    std::vector<std::string> extra;
    for (int i = 0; i < 24; ++i) {
      const std::string s = Sample(g, rng, 80);
      extra.push_back(s);
      extra.push_back(Mutate(s, rng));
      extra.push_back(Mutate(Mutate(s, rng), rng));
    }
    for (auto& s : c.strings) extra.push_back(s);
    std::sort(extra.begin(), extra.end());
    extra.erase(std::unique(extra.begin(), extra.end()), extra.end());
    c.strings = std::move(extra);
    n_strings += static_cast<int>(c.strings.size());
  }
  Json in = Json::array();
  for (const Case& c : cases) in.push_back({{"grammar", c.grammar}, {"strings", c.strings}});
  const fs::path tmp = fs::temp_directory_path() / "gbnf_oracle";
  fs::create_directories(tmp);
  std::ofstream(tmp / "cases.json") << in.dump();
  std::string log;
  ASSERT_EQ(Shell(oracle + " --cases '" + (tmp / "cases.json").string() + "' --out '" +
                      (tmp / "out.json").string() + "' 2>&1",
                  log),
            0)
      << "the oracle failed: " << log;
  std::ifstream out_file(tmp / "out.json");
  ASSERT_TRUE(out_file.good()) << "the oracle wrote no result";
  const Json out = Json::parse(out_file);
  ASSERT_EQ(out.size(), cases.size());
  int agree = 0, accepted = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (c.malformed) {
      EXPECT_FALSE(out[i]["parsed"].get<bool>()) << "llama.cpp accepted: " << c.grammar;
      EXPECT_THROW(Compile(c.grammar), GrammarError) << c.grammar;
      continue;
    }
    ASSERT_TRUE(out[i]["parsed"].get<bool>()) << c.name << ": llama.cpp refused the grammar";
    auto g = Compile(c.grammar);
    for (size_t k = 0; k < c.strings.size(); ++k) {
      const bool theirs = out[i]["accepts"][k].get<bool>();
      const bool ours = Ours(g, c.strings[k]);
      EXPECT_EQ(ours, theirs) << c.name << ": '" << c.strings[k] << "'";
      agree += ours == theirs;
      accepted += theirs;
    }
  }
  std::printf(
      "gbnf oracle: %zu grammars (%zu from llama.cpp), %d strings, %d agree, %d in the "
      "language\n",
      cases.size(), files.size(), n_strings, agree, accepted);
  EXPECT_GT(accepted, n_strings / 5);  // the strings are not all trivially outside
}

}  // namespace
}  // namespace crossword::grammar
