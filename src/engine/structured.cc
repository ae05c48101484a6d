// The tool-call grammar (Qwen XML format) and the engine's grammar vocabulary and cache.
#include "engine/structured.h"

#include <algorithm>
#include <set>

#include "engine/engine.h"
#include "grammar/gbnf_text.h"
#include "grammar/json_schema.h"

namespace crossword::engine {
namespace {

using Json = nlohmann::ordered_json;

// The parameter's declared type as the output parser reads it (chat::TypeParameterValue): the
// first non-null entry of `type`, else the first typed branch of anyOf/oneOf.
std::string DeclaredType(const Json& schema) {
  if (!schema.is_object()) return "";
  auto pick = [](const Json& t) -> std::string {
    if (t.is_string()) return t.get<std::string>();
    if (t.is_array()) {
      for (const Json& e : t) {
        if (e.is_string() && e != "null") return e.get<std::string>();
      }
    }
    return "";
  };
  if (schema.contains("type")) return pick(schema["type"]);
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key) || !schema[key].is_array()) continue;
    for (const Json& alt : schema[key]) {
      if (alt.is_object() && alt.contains("type")) {
        const std::string t = pick(alt["type"]);
        if (!t.empty()) return t;
      }
    }
  }
  return "";
}

bool WrittenAsText(const Json& schema) {
  const std::string t = DeclaredType(schema);
  return t.empty() || t == "string" || t == "str" || t == "text" || t == "varchar" || t == "char" ||
         t == "enum";
}

// Rules (named `<prefix>root` and below) for one parameter value.
std::string ValueGbnf(const Json& schema, const std::string& prefix) {
  if (WrittenAsText(schema)) {
    if (schema.is_object() && (schema.contains("enum") || schema.contains("const"))) {
      const Json values = schema.contains("enum") ? schema["enum"] : Json::array({schema["const"]});
      std::string alts;
      for (const Json& v : values) {
        const std::string text = v.is_string() ? v.get<std::string>() : grammar::CanonicalJson(v);
        if (text.find("\n</parameter>") != std::string::npos) continue;
        alts += (alts.empty() ? "" : " | ") + grammar::GbnfLiteral(text);
      }
      return prefix + "root ::= " + (alts.empty() ? "[^\\x00-\\U0010FFFF]" : alts) + "\n";
    }
    const bool constrained =
        schema.is_object() && (schema.contains("pattern") || schema.contains("format") ||
                               schema.contains("minLength") || schema.contains("maxLength"));
    if (constrained) {
      grammar::JsonSchemaOptions o;
      o.raw_string = true;
      o.rule_prefix = prefix;
      return grammar::JsonSchemaToGbnf(schema, o);
    }
    return prefix + "root ::= " + grammar::GbnfNotContaining("\n</parameter>") + "\n";
  }
  grammar::JsonSchemaOptions o;
  o.whitespace = grammar::JsonSchemaOptions::Whitespace::kFlexible;
  o.rule_prefix = prefix;
  return grammar::JsonSchemaToGbnf(schema, o);
}

}  // namespace

std::string ToolCallGbnf(const Json& tools, ToolGrammarMode mode, const std::string& name,
                         bool parallel) {
  std::string text;
  std::vector<std::string> functions;  // rule per function: "NAME>\n" and its parameters
  std::string named_body;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& fn = tools[i]["function"];
    const std::string fname = fn["name"].get<std::string>();
    if (!name.empty() && fname != name) continue;
    const std::string prefix = "tc" + std::to_string(i) + "-";
    const Json params = fn.contains("parameters") ? fn["parameters"] : Json::object();
    std::set<std::string> required;
    if (params.contains("required") && params["required"].is_array()) {
      for (const Json& r : params["required"]) {
        if (r.is_string()) required.insert(r.get<std::string>());
      }
    }
    std::string body;
    if (params.contains("properties") && params["properties"].is_object()) {
      size_t k = 0;
      for (auto it = params["properties"].begin(); it != params["properties"].end(); ++it, ++k) {
        const std::string vp = prefix + "p" + std::to_string(k) + "-";
        try {
          text += ValueGbnf(*it, vp);
        } catch (const grammar::GrammarError& e) {
          throw grammar::GrammarError(e.kind(), fmt::format("tools[{}] '{}', parameter '{}': {}", i,
                                                            fname, it.key(), e.what()));
        }
        const std::string item = grammar::GbnfLiteral("<parameter=" + it.key() + ">\n") + " " + vp +
                                 "root " + grammar::GbnfLiteral("\n</parameter>\n");
        body += (body.empty() ? "" : " ") + (required.count(it.key()) ? item : "(" + item + ")?");
      }
    }
    text += prefix + "body ::= " + (body.empty() ? "\"\"" : body) + "\n";
    text += prefix + "fn ::= " + grammar::GbnfLiteral(fname + ">\n") + " " + prefix + "body\n";
    functions.push_back(prefix + "fn");
    if (fname == name) named_body = prefix + "body";
  }
  if (functions.empty()) {
    FailGrammar(grammar::ErrorKind::kEmpty, "tools: no function{} to call",
                name.empty() ? "" : " named '" + name + "'");
  }
  std::string fns;
  for (const auto& f : functions) fns += (fns.empty() ? "" : " | ") + f;
  const std::string close = grammar::GbnfLiteral("</function>\n</tool_call>");
  text += "tc-call ::= " + grammar::GbnfLiteral("<tool_call>\n<function=") + " (" + fns + ") " +
          close + "\n";
  const std::string more = parallel ? " (\"\\n\" tc-call)*" : "";
  switch (mode) {
    case ToolGrammarMode::kAuto:
      text += "root ::= " + grammar::GbnfNotContaining("<tool_call>") + " (tc-call" + more + ")?\n";
      break;
    case ToolGrammarMode::kRequired:
      text += "root ::= tc-call" + more + "\n";
      break;
    case ToolGrammarMode::kAfterFunctionOpen:
      text += "root ::= (" + fns + ") " + close + more + "\n";
      break;
    case ToolGrammarMode::kAfterNamedOpen:
      if (named_body.empty()) {
        FailGrammar(grammar::ErrorKind::kEmpty, "tools: no function named '{}'", name);
      }
      text += "root ::= " + named_body + " " + close + more + "\n";
      break;
  }
  return text;
}

std::shared_ptr<const grammar::TokenVocabulary> Engine::GrammarVocabulary() const {
  std::call_once(vocab_once_, [this] {
    const tokenizer::Tokenizer& tok = *tokenizer_;
    std::vector<std::string> bytes;
    std::vector<int32_t> excluded;
    bytes.reserve(static_cast<size_t>(tok.n_vocab()));
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
      bytes.emplace_back(tok.TokenBytes(id));
      const auto type = tok.GetTokenType(id);
      if (type == tokenizer::TokenType::kControl || type == tokenizer::TokenType::kUnused) {
        excluded.push_back(id);
      }
    }
    vocab_ =
        std::make_shared<const grammar::TokenVocabulary>(std::move(bytes), excluded, tok.eog_ids());
  });
  return vocab_;
}

std::shared_ptr<const grammar::CompiledGrammar> Engine::CompileGrammar(
    const std::string& gbnf, bool leading_whitespace, const grammar::GrammarLimits& limits) const {
  const std::string key = (leading_whitespace ? "1" : "0") + gbnf;
  {
    std::lock_guard lock(grammar_mu_);
    for (auto it = grammar_cache_.begin(); it != grammar_cache_.end(); ++it) {
      if (it->first == key) {
        grammar_cache_.splice(grammar_cache_.begin(), grammar_cache_, it);  // most recent first
        return it->second;
      }
    }
  }
  grammar::Grammar g = grammar::ParseGbnf(gbnf, limits);
  if (leading_whitespace) {  // an answer after </think> may open with a few newlines
    grammar::ByteSet ws;
    ws.Set(' ');
    ws.Set('\n');
    const uint32_t rule = g.RuleId("root--after-reasoning");
    g.rules[rule].defined = true;
    g.rules[rule].body = g.Seq({g.Repeat(g.Bytes(ws), 0, 4), g.Ref(g.root)});
    g.root = rule;
  }
  auto compiled = std::make_shared<const grammar::CompiledGrammar>(
      grammar::CompileGrammar(g, limits), GrammarVocabulary());
  std::lock_guard lock(grammar_mu_);
  grammar_cache_.emplace_front(key, compiled);
  if (grammar_cache_.size() > kGrammarCacheEntries) grammar_cache_.pop_back();
  return compiled;
}

}  // namespace crossword::engine
