// The JSON-Schema-Test-Suite (Debian package json-schema-test-suite, drafts 4, 6 and 7) against
// the compiled matcher: for every case whose schema is in the supported subset, the canonical
// text of each valid instance is accepted token by token (Qwen3 tokenizer, the real 151,669-token
// vocabulary from the tok_oracle fixture) and ends with EOS allowed, and every invalid instance
// is refused. Each token's verdict must also agree with the allowed-token mask. Cases outside the
// subset are counted and listed by reason; a few reasons are expected (see kExcludedFiles).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/tokenizer.h"

namespace crossword::grammar {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

// Files whose cases the canonical-text method cannot decide.
const std::map<std::string, std::string> kExcludedFiles = {
    {"zeroTerminatedFloats.json",
     "canonical JSON writes 1.0 as 1, so it cannot tell a float with a zero fraction from an "
     "integer"},
    {"content.json",
     "contentMediaType/contentEncoding are annotations, not assertions, in JSON Schema (this "
     "optional file tests validators that choose to enforce them); crossword does not"},
};

const tokenizer::Tokenizer& Qwen3() {
  static const tokenizer::Tokenizer tok =
      tokenizer::Tokenizer::FromVocabulary(tokenizer::VocabularyFromHfFiles(
          std::string(CROSSWORD_TOK_ORACLE_DIR) + "/qwen2.json",
          std::string(CROSSWORD_TOK_ORACLE_DIR) + "/tokenizer_config.json"));
  return tok;
}

std::shared_ptr<const TokenVocabulary> VocabOf(const tokenizer::Tokenizer& tok) {
  std::vector<std::string> bytes;
  std::vector<int32_t> excluded;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    bytes.emplace_back(tok.TokenBytes(id));
    const auto type = tok.GetTokenType(id);
    if (type == tokenizer::TokenType::kControl || type == tokenizer::TokenType::kUnused) {
      excluded.push_back(id);
    }
  }
  return std::make_shared<const TokenVocabulary>(std::move(bytes), excluded, tok.eog_ids());
}

// Object keys in the order the grammar writes them: properties keys, then required names, by
// first appearance in the schema document; other keys after those, in instance order.
std::map<std::string, size_t> KeyRanks(const Json& schema) {
  std::map<std::string, size_t> rank;
  std::vector<const Json*> stack{&schema};
  std::vector<const Json*> order;
  while (!stack.empty()) {  // document order: visit children in order
    const Json* v = stack.back();
    stack.pop_back();
    order.push_back(v);
    if (v->is_structured()) {
      std::vector<const Json*> kids;
      for (const Json& c : *v) kids.push_back(&c);
      for (auto it = kids.rbegin(); it != kids.rend(); ++it) stack.push_back(*it);
    }
  }
  for (const Json* v : order) {
    if (!v->is_object()) continue;
    if (v->contains("properties") && (*v)["properties"].is_object()) {
      for (auto it = (*v)["properties"].begin(); it != (*v)["properties"].end(); ++it) {
        rank.emplace(it.key(), rank.size());
      }
    }
    // Object values of const and enum are written in their own key order.
    for (const char* k : {"const", "enum"}) {
      if (!v->contains(k)) continue;
      std::vector<const Json*> vals{&(*v)[k]};
      while (!vals.empty()) {
        const Json* x = vals.back();
        vals.pop_back();
        if (x->is_object()) {
          for (auto it = x->begin(); it != x->end(); ++it) rank.emplace(it.key(), rank.size());
        }
        if (x->is_structured()) {
          for (const Json& c : *x) vals.push_back(&c);
        }
      }
    }
    if (v->contains("required") && (*v)["required"].is_array()) {
      for (const Json& r : (*v)["required"]) {
        if (r.is_string()) rank.emplace(r.get<std::string>(), rank.size());
      }
    }
  }
  return rank;
}

Json Reorder(const Json& v, const std::map<std::string, size_t>& rank) {
  if (v.is_array()) {
    Json out = Json::array();
    for (const Json& x : v) out.push_back(Reorder(x, rank));
    return out;
  }
  if (!v.is_object()) return v;
  std::vector<std::pair<size_t, std::string>> keys;
  size_t i = 0;
  for (auto it = v.begin(); it != v.end(); ++it, ++i) {
    auto r = rank.find(it.key());
    keys.emplace_back(r == rank.end() ? rank.size() + i : r->second, it.key());
  }
  std::stable_sort(keys.begin(), keys.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  Json out = Json::object();
  for (const auto& [r, k] : keys) out[k] = Reorder(v[k], rank);
  return out;
}

struct Tally {
  int cases = 0, supported = 0, passed = 0;
  std::map<std::string, int> unsupported;  // reason -> cases
  std::vector<std::string> failures;
};

void RunFile(const fs::path& file, int draft, Tally& t) {
  std::ifstream in(file);
  const Json groups = Json::parse(in);
  const auto& tok = Qwen3();
  static const auto vocab = VocabOf(tok);
  const std::string name = file.filename().string();
  for (const Json& g : groups) {
    const std::string where = name + ": " + g["description"].get<std::string>();
    const int n = static_cast<int>(g["tests"].size());
    t.cases += n;
    auto excluded = kExcludedFiles.find(name);
    if (excluded != kExcludedFiles.end()) {
      t.unsupported[excluded->second] += n;
      continue;
    }
    JsonSchemaOptions o;
    o.default_draft = draft;
    std::shared_ptr<const CompiledGrammar> grammar;
    bool empty = false;
    try {
      GrammarLimits limits;
      limits.max_text_bytes = o.max_grammar_bytes;
      limits.max_nesting = 256;
      grammar = std::make_shared<const CompiledGrammar>(
          CompileGrammar(ParseGbnf(JsonSchemaToGbnf(g["schema"], o), limits), limits), vocab);
    } catch (const GrammarError& e) {
      if (e.kind() == ErrorKind::kEmpty) {
        empty = true;
      } else if (e.kind() == ErrorKind::kUnsupported || e.kind() == ErrorKind::kTooLarge) {
        std::string reason = e.what();
        // Group by the keyword part of the message, not the path.
        const size_t colon = reason.find(": ", reason.find(": ") + 2);
        if (colon != std::string::npos) reason = reason.substr(colon + 2);
        t.unsupported[reason] += n;
        continue;
      } else {
        t.failures.push_back(where + ": compile error: " + e.what());
        continue;
      }
    }
    t.supported += n;
    const auto rank = KeyRanks(g["schema"]);
    for (const Json& c : g["tests"]) {
      const bool valid = c["valid"].get<bool>();
      const std::string text = CanonicalJson(Reorder(c["data"], rank));
      bool accepted = false;
      if (!empty) {
        Matcher m(grammar);
        std::vector<uint64_t> mask(m.mask_words());
        accepted = true;
        for (int32_t id : tok.Encode(text, false)) {
          m.FillMask(mask);
          const bool in_mask = MaskTest(mask, id);
          const bool ok = m.Accept(id);
          if (in_mask != ok) {
            t.failures.push_back(fmt::format("{}: {}: mask says {} for token {} but Accept says {}",
                                             where, text, in_mask, id, ok));
          }
          if (!ok) {
            accepted = false;
            break;
          }
        }
        if (accepted) {
          m.FillMask(mask);
          accepted = m.CanEnd() && MaskTest(mask, tok.eog_ids()[0]) && m.Accept(tok.eog_ids()[0]);
        }
      }
      if (accepted == valid) {
        ++t.passed;
      } else {
        t.failures.push_back(fmt::format("{}: {} ({}): expected {}", where, text,
                                         c["description"].get<std::string>(),
                                         valid ? "accepted" : "refused"));
      }
    }
  }
}

// Supported cases per draft when this test was written; fewer means a keyword stopped compiling.
int SupportedFloor(int draft) { return draft == 4 ? 229 : draft == 6 ? 308 : 319; }

void RunDraft(int draft) {
  const fs::path dir = fs::path(CROSSWORD_JSON_SCHEMA_SUITE) / ("draft" + std::to_string(draft));
  ASSERT_TRUE(fs::is_directory(dir)) << dir << " is missing: install json-schema-test-suite "
                                     << "(scripts/install-deps)";
  std::vector<fs::path> files;
  for (const char* sub : {"", "optional", "optional/format"}) {
    if (!fs::is_directory(dir / sub)) continue;
    for (const auto& e : fs::directory_iterator(dir / sub)) {
      if (e.path().extension() == ".json") files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  Tally t;
  for (const auto& f : files) RunFile(f, draft, t);
  int unsupported = 0;
  for (const auto& [reason, n] : t.unsupported) unsupported += n;
  std::printf("draft%d: %d cases: %d supported (%d passed), %d not supported:\n", draft, t.cases,
              t.supported, t.passed, unsupported);
  for (const auto& [reason, n] : t.unsupported) std::printf("  %4d  %s\n", n, reason.c_str());
  for (const auto& f : t.failures) ADD_FAILURE() << f;
  EXPECT_EQ(t.passed, t.supported);
  EXPECT_GE(t.supported, SupportedFloor(draft));
}

TEST(JsonSchemaSuite, Draft4) { RunDraft(4); }
TEST(JsonSchemaSuite, Draft6) { RunDraft(6); }
TEST(JsonSchemaSuite, Draft7) { RunDraft(7); }

}  // namespace
}  // namespace crossword::grammar
