// JSON Schema -> GBNF: bounds on the input, the schema visitor, objects, arrays, enums.
#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "base/json_gate.h"
#include "base/utf8.h"
#include "grammar/json_internal.h"
#include "grammar/json_merge.h"
#include "grammar/matcher.h"

namespace crossword::grammar {
namespace json_internal {
namespace {

// Depth, value count and text size of a parsed document, without recursion.
void CheckDocument(const Json& doc, const JsonSchemaOptions& o) {
  std::vector<std::pair<const Json*, uint32_t>> stack{{&doc, 1}};
  size_t nodes = 0, bytes = 0;
  while (!stack.empty()) {
    auto [v, depth] = stack.back();
    stack.pop_back();
    if (++nodes > o.max_schema_nodes) {
      FailGrammar(ErrorKind::kTooLarge, "json schema: more than {} values in the schema",
                  o.max_schema_nodes);
    }
    if (depth > o.max_depth) {
      FailGrammar(ErrorKind::kTooLarge, "json schema: nested deeper than {} levels", o.max_depth);
    }
    bytes += v->is_string() ? v->get_ref<const std::string&>().size() + 2 : 8;
    if (v->is_object()) {
      for (auto it = v->begin(); it != v->end(); ++it) bytes += it.key().size() + 3;
    }
    if (bytes > o.max_schema_bytes) {
      FailGrammar(ErrorKind::kTooLarge, "json schema: the schema is larger than {} bytes",
                  o.max_schema_bytes);
    }
    if (v->is_structured()) {
      for (const Json& c : *v) stack.emplace_back(&c, depth + 1);
    }
  }
}

int DraftOf(const Json& root, int fallback) {
  if (!root.is_object() || !root.contains("$schema") || !root["$schema"].is_string()) {
    return fallback;
  }
  const std::string s = root["$schema"].get<std::string>();
  if (s.find("draft-04") != std::string::npos) return 4;
  if (s.find("draft-06") != std::string::npos) return 6;
  if (s.find("draft-07") != std::string::npos) return 7;
  if (s.find("2019-09") != std::string::npos) return 2019;
  if (s.find("2020-12") != std::string::npos) return 2020;
  return fallback;
}

std::string Join(const std::vector<std::string>& alts, const char* sep = " | ") {
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? sep : "") + alts[i];
  return out;
}

std::string Alternation(const std::vector<std::string>& alts) {
  if (alts.empty()) return std::string(kNothing);
  if (alts.size() == 1) return alts[0];
  return "(" + Join(alts) + ")";
}

uint64_t Count(const Json& s, const char* k, const std::string& path) {
  const Json& v = s[k];
  const double d = v.is_number() ? v.get<double>() : -1.0;
  if (d < 0 || d != std::floor(d)) {
    FailGrammar(ErrorKind::kSyntax, "json schema: {}: '{}' must be a non-negative integer", path,
                k);
  }
  // A double at or above 2^64 has no uint64_t value (the cast would be undefined behaviour; the
  // request fuzzer sent maxLength 2e35): it saturates, which the callers' limits then reject or
  // read as "no bound".
  if (d >= 18446744073709551616.0) return UINT64_MAX;
  return static_cast<uint64_t>(d);
}

std::string TypeOfValue(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  if (v.is_string()) return "string";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  const double d = v.get<double>();
  return d == std::floor(d) && std::fabs(d) < 1e21 ? "integer" : "number";
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, int draft, const JsonSchemaOptions& o, Rules& rules)
      : root_(root), draft_(draft), o_(o), rules_(rules) {
    flexible_ = o.whitespace == JsonSchemaOptions::Whitespace::kFlexible;
  }

  // Visits the root and then every referenced subschema (iteratively, so reference chains do
  // not deepen the stack). Returns the root expression.
  std::string Run() {
    const std::string root = o_.raw_string ? RawRoot() : Visit(root_, "#");
    while (!pending_.empty()) {
      auto [ref, name] = pending_.back();
      pending_.pop_back();
      rules_.Define(name, Visit(ResolveRef(root_, ref, ref), ref));
      CheckSize();
    }
    return root;
  }

  // A raw string (JsonSchemaOptions::raw_string): enum/const values or a constrained string.
  std::string RawRoot() {
    if (root_.is_boolean())
      return root_.get<bool>() ? CharRule(rules_, true) + "*" : std::string(kNothing);
    CheckKeywords(root_, "#", true);
    const Json s = Flatten(root_, root_, "#", draft_);
    if (s.contains("anyOf") || s.contains("oneOf")) {
      FailGrammar(ErrorKind::kUnsupported,
                  "json schema: #: anyOf/oneOf in a value written as plain text is not supported");
    }
    if (s.contains("enum")) {
      std::vector<std::string> alts;
      for (const Json& v : s["enum"]) {
        if (v.is_string()) alts.push_back(GbnfLiteral(v.get<std::string>()));
      }
      return Alternation(alts);
    }
    if (s.contains("type") && !Types(s, "#").count("string")) {
      FailGrammar(ErrorKind::kUnsupported,
                  "json schema: #: a value written as plain text must be a string");
    }
    return String(s, "#", /*raw=*/true);
  }

  std::string AnyValue() {
    const std::string chr = CharRule(rules_);
    const std::string str = rules_.Shared("j--string", "\"\\\"\" " + chr + "* \"\\\"\"");
    const std::string num = NumberGbnf(Json(), false, Json(), false, false, rules_);
    const std::string value = rules_.Name("j--value"), object = rules_.Name("j--object"),
                      array = rules_.Name("j--array");
    rules_.Shared("j--value", object + " | " + array + " | " + str + " | " + num +
                                  " | \"true\" | \"false\" | \"null\"");
    rules_.Shared("j--object", Open("{") + " (" + str + Colon() + " " + value + " (" + Comma() +
                                   " " + str + Colon() + " " + value + ")*)? " + Close("}"));
    rules_.Shared("j--array",
                  Open("[") + " (" + value + " (" + Comma() + " " + value + ")*)? " + Close("]"));
    return value;
  }

 private:
  std::string Ws() { return flexible_ ? rules_.Shared("j--ws", "[ \\t\\n]{0,20}") : ""; }
  std::string Open(const char* c) {
    return flexible_ ? GbnfLiteral(c) + " " + Ws() : GbnfLiteral(c);
  }
  std::string Close(const char* c) {
    return flexible_ ? Ws() + " " + GbnfLiteral(c) : GbnfLiteral(c);
  }
  std::string Comma() { return flexible_ ? Ws() + " \",\" " + Ws() : "\",\""; }
  std::string Colon() { return flexible_ ? " " + Ws() + " \":\" " + Ws() : " \":\""; }

  void CheckSize() {
    if (rules_.bytes() > o_.max_grammar_bytes) {
      FailGrammar(ErrorKind::kTooLarge,
                  "json schema: the grammar it needs is larger than {} bytes; simplify the schema",
                  o_.max_grammar_bytes);
    }
  }

  std::string RefRule(const std::string& ref, const std::string& path) {
    ResolveRef(root_, ref, path);  // fail early, naming the referring path
    auto it = ref_rules_.find(ref);
    if (it != ref_rules_.end()) return it->second;
    const std::string name = rules_.Reserve("ref-" + ref.substr(std::min<size_t>(ref.size(), 2)));
    ref_rules_[ref] = name;
    pending_.emplace_back(ref, name);
    return name;
  }

  std::string Visit(const Json& schema, const std::string& path) {
    CheckSize();
    if (schema.is_boolean()) return schema.get<bool>() ? AnyValue() : std::string(kNothing);
    CheckKeywords(schema, path, &schema == &root_);
    if (schema.contains("$ref") && (draft_ < 2019 || !HasAssertions(schema, {"$ref"}))) {
      if (!schema["$ref"].is_string()) {
        FailGrammar(ErrorKind::kSyntax, "json schema: {}: $ref must be a string", path);
      }
      return RefRule(schema["$ref"].get<std::string>(), path);
    }
    const Json s = Flatten(root_, schema, path, draft_);
    if (s.contains("anyOf") || s.contains("oneOf")) return Combinator(s, path);
    if (s.contains("enum")) return Enum(s, path);
    const std::set<std::string> types = Types(s, path);
    std::vector<std::string> alts;
    if (types.count("null")) alts.push_back("\"null\"");
    if (types.count("boolean")) alts.push_back("(\"true\" | \"false\")");
    if (types.count("number") || types.count("integer")) {
      alts.push_back(Number(s, path, !types.count("number")));
    }
    if (types.count("string")) alts.push_back(String(s, path));
    if (types.count("array")) alts.push_back(Array(s, path));
    if (types.count("object")) alts.push_back(Object(s, path));
    alts.erase(std::remove(alts.begin(), alts.end(), std::string(kNothing)), alts.end());
    return Alternation(alts);
  }

  std::set<std::string> Types(const Json& s, const std::string& path) {
    static const std::set<std::string> kAll = {"null",  "boolean", "object",
                                               "array", "string",  "number"};
    if (!s.contains("type")) return kAll;
    std::set<std::string> t;
    const Json& ty = s["type"];
    for (const Json& x : ty.is_array() ? ty : Json::array({ty})) {
      if (!x.is_string() || (!kAll.count(x.get<std::string>()) && x != "integer")) {
        FailGrammar(ErrorKind::kSyntax, "json schema: {}: unknown type {}", path, x.dump());
      }
      t.insert(x.get<std::string>());
    }
    return t;
  }

  std::string Combinator(const Json& s, const std::string& path) {
    if (s.contains("anyOf") && s.contains("oneOf")) {
      FailGrammar(ErrorKind::kUnsupported,
                  "json schema: {}: anyOf and oneOf in the same schema are not supported", path);
    }
    const bool one = s.contains("oneOf");
    const char* key = one ? "oneOf" : "anyOf";
    const Json& list = s[key];
    if (!list.is_array() || list.empty()) {
      FailGrammar(ErrorKind::kSyntax, "json schema: {}: {} must be a non-empty array", path, key);
    }
    Json base = s;
    base.erase(key);
    const bool merge = HasAssertions(base);
    std::vector<Json> branches;
    std::vector<std::string> alts;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string p = path + "/" + key + "/" + std::to_string(i);
      Json b = merge ? MergeSchemas(root_, base, Flatten(root_, list[i], p, draft_), p, draft_)
                     : list[i];
      if (one) branches.push_back(b.is_object() ? Flatten(root_, b, p, draft_) : b);
      alts.push_back(rules_.Add(std::string(key) + "-" + std::to_string(i), Visit(b, p)));
    }
    if (one) {
      for (size_t i = 0; i < branches.size(); ++i) {
        for (size_t j = i + 1; j < branches.size(); ++j) {
          if (!ProvablyDisjoint(branches[i], branches[j])) {
            FailGrammar(ErrorKind::kUnsupported,
                        "json schema: {}: oneOf whose branches {} and {} may both match is not "
                        "supported (a grammar cannot reject values matching both; use anyOf, or "
                        "give the branches different types or a required property with "
                        "different const values)",
                        path, i, j);
          }
        }
      }
    }
    return Alternation(alts);
  }

  // Values that also satisfy the rest of the schema. Beyond `type`, that is decided by
  // compiling the rest and matching each value's canonical text against it.
  std::string Enum(const Json& s, const std::string& path) {
    if (!s["enum"].is_array()) {
      FailGrammar(ErrorKind::kSyntax, "json schema: {}: enum must be an array", path);
    }
    Json rest = s;
    rest.erase("enum");
    std::set<std::string> types = Types(rest, path);
    std::unique_ptr<Matcher> check;
    if (HasAssertions(rest, {"type"})) {
      Rules sub_rules;
      SchemaCompiler sub(root_, draft_, o_, sub_rules);
      sub.pending_.clear();
      const std::string expr = sub.Visit(rest, path);
      while (!sub.pending_.empty()) {
        auto [ref, name] = sub.pending_.back();
        sub.pending_.pop_back();
        sub_rules.Define(name, sub.Visit(ResolveRef(root_, ref, ref), ref));
      }
      GrammarLimits limits;
      limits.max_text_bytes = o_.max_grammar_bytes;
      limits.max_nesting = 256;
      try {
        check = std::make_unique<Matcher>(std::make_shared<const CompiledGrammar>(
            CompileGrammar(ParseGbnf(sub_rules.Text(expr), limits), limits), ByteVocabulary()));
      } catch (const GrammarError& e) {
        if (e.kind() != ErrorKind::kEmpty) throw;
        return std::string(kNothing);
      }
    }
    std::vector<std::string> alts;
    std::set<std::string> seen;
    for (const Json& v : s["enum"]) {
      const std::string t = TypeOfValue(v);
      if (!types.count(t) && !(t == "integer" && types.count("number"))) continue;
      const std::string text = CanonicalJson(v);
      if (check) {
        Matcher m = check->Fork();
        if (!m.AcceptBytes(text) || !m.CanEnd()) continue;
      }
      if (seen.insert(text).second) alts.push_back(GbnfLiteral(text));
    }
    return Alternation(alts);
  }

  static std::shared_ptr<const TokenVocabulary> ByteVocabulary() {
    static const auto vocab = [] {
      std::vector<std::string> t;
      for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
      return std::make_shared<const TokenVocabulary>(std::move(t), std::span<const int32_t>(),
                                                     std::span<const int32_t>());
    }();
    return vocab;
  }

  std::string Number(const Json& s, const std::string& path, bool integer) {
    if (s.contains("multipleOf")) {
      FailGrammar(ErrorKind::kUnsupported, "json schema: {}: keyword 'multipleOf' is not supported",
                  path);
    }
    Json lo, hi;
    bool lo_ex = false, hi_ex = false;
    for (const char* k : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (s.contains(k) && !s[k].is_number()) {
        FailGrammar(ErrorKind::kSyntax, "json schema: {}: '{}' must be a number", path, k);
      }
    }
    if (s.contains("minimum")) lo = s["minimum"];
    if (s.contains("exclusiveMinimum") &&
        (lo.is_null() || s["exclusiveMinimum"].get<double>() >= lo.get<double>())) {
      lo = s["exclusiveMinimum"];
      lo_ex = true;
    }
    if (s.contains("maximum")) hi = s["maximum"];
    if (s.contains("exclusiveMaximum") &&
        (hi.is_null() || s["exclusiveMaximum"].get<double>() <= hi.get<double>())) {
      hi = s["exclusiveMaximum"];
      hi_ex = true;
    }
    return NumberGbnf(lo, lo_ex, hi, hi_ex, integer, rules_);
  }

  std::string String(const Json& s, const std::string& path, bool raw = false) {
    const std::string quote = raw ? "" : "\"\\\"\" ";
    const std::string unquote = raw ? "" : " \"\\\"\"";
    const uint64_t min = s.contains("minLength") ? Count(s, "minLength", path) : 0;
    const bool has_max = s.contains("maxLength");
    const uint64_t max = has_max ? Count(s, "maxLength", path) : 0;
    const bool lengths = min > 0 || has_max;
    const char* what = s.contains("pattern") ? "pattern" : s.contains("format") ? "format" : "";
    if (*what) {
      if (lengths) {
        FailGrammar(ErrorKind::kUnsupported,
                    "json schema: {}: '{}' together with minLength/maxLength is not supported",
                    path, what);
      }
      if (s.contains("pattern") && s.contains("format")) {
        FailGrammar(ErrorKind::kUnsupported,
                    "json schema: {}: 'pattern' together with 'format' is not supported", path);
      }
      if (s.contains("pattern")) {
        if (!s["pattern"].is_string()) {
          FailGrammar(ErrorKind::kSyntax, "json schema: {}: pattern must be a string", path);
        }
        return quote + RegexGbnf(s["pattern"].get<std::string>(), path, rules_, raw) + unquote;
      }
      const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
      const std::string body = FormatGbnf(f, raw);
      if (body.empty()) {
        FailGrammar(ErrorKind::kUnsupported,
                    "json schema: {}: format '{}' is not supported (supported: date, time, "
                    "date-time, uuid, email, hostname, ipv4, json-pointer, "
                    "relative-json-pointer)",
                    path, f);
      }
      return quote + body + unquote;
    }
    if (has_max && max < min) return std::string(kNothing);
    if (has_max && max > 10000) {
      FailGrammar(ErrorKind::kTooLarge, "json schema: {}: maxLength above 10000 is not supported",
                  path);
    }
    if (min > 10000) {
      FailGrammar(ErrorKind::kTooLarge, "json schema: {}: minLength above 10000 is not supported",
                  path);
    }
    const std::string chr = CharRule(rules_, raw);
    if (!lengths && !raw) return rules_.Shared("j--string", "\"\\\"\" " + chr + "* \"\\\"\"");
    if (!lengths) return chr + "*";
    return quote + chr + "{" + std::to_string(min) +
           (has_max ? (max == min ? "" : "," + std::to_string(max)) : ",") + "}" + unquote;
  }

  std::string Array(const Json& s, const std::string& path) {
    std::vector<std::string> prefix;
    std::string rest;
    bool rest_open = true;
    auto item = [&](const Json& sub, const std::string& p) {
      return rules_.Add(p.substr(std::min<size_t>(p.size(), 2)) + "-item", Visit(sub, p));
    };
    if (s.contains("prefixItems") || (s.contains("items") && s["items"].is_array())) {
      const bool modern = s.contains("prefixItems");
      const Json& list = modern ? s["prefixItems"] : s["items"];
      const char* k = modern ? "prefixItems" : "items";
      for (size_t i = 0; i < list.size(); ++i) {
        prefix.push_back(item(list[i], path + "/" + k + "/" + std::to_string(i)));
      }
      const char* rk = modern ? "items" : "additionalItems";
      if (s.contains(rk)) {
        if (s[rk] == false) {
          rest_open = false;
        } else {
          rest = item(s[rk], path + "/" + rk);
        }
      }
    } else if (s.contains("items")) {
      if (s["items"] == false) {
        rest_open = false;
      } else {
        rest = item(s["items"], path + "/items");
      }
    }
    if (rest_open && rest.empty()) rest = AnyValue();
    const uint64_t mn = s.contains("minItems") ? Count(s, "minItems", path) : 0;
    const bool has_mx = s.contains("maxItems");
    uint64_t mx = has_mx ? Count(s, "maxItems", path) : UINT64_MAX;
    if (!rest_open) mx = std::min<uint64_t>(mx, prefix.size());
    if (mx < mn) return std::string(kNothing);
    if (mn > 10000 || (has_mx && mx > 10000 && mx != UINT64_MAX)) {
      FailGrammar(ErrorKind::kTooLarge,
                  "json schema: {}: minItems/maxItems above 10000 are not supported", path);
    }
    // Items after `i` emitted ones: the tuple's items while they last, then `rest`.
    const size_t p = prefix.size();
    std::string tail;  // what follows once the tuple is complete (i == p)
    if (p <= mx) {
      const uint64_t a = mn > p ? mn - p : 0;
      const uint64_t b = mx == UINT64_MAX ? UINT64_MAX : mx - p;
      auto count = [](uint64_t lo, uint64_t hi) {
        return "{" + std::to_string(lo) +
               (hi == UINT64_MAX ? ","
                : hi == lo       ? ""
                                 : "," + std::to_string(hi)) +
               "}";
      };
      const std::string more = "(" + Comma() + " " + rest + ")";
      if (b == 0) {
        tail = "\"\"";
      } else if (p > 0) {
        tail = more + count(a, b);
      } else if (a == 0) {
        tail = "(" + rest + " " + more + count(0, b == UINT64_MAX ? b : b - 1) + ")?";
      } else {
        tail = rest + " " + more + count(a - 1, b == UINT64_MAX ? b : b - 1);
      }
    }
    std::string body = tail;
    for (size_t i = std::min<uint64_t>(p, mx); i-- > 0;) {
      std::string step = (i == 0 ? "" : Comma() + " ") + prefix[i] + " " + body;
      body = i < mn ? step : "(" + step + ")?";
      if (i % 16 == 0 && i > 0) body = rules_.Add("tuple", body);  // keeps nesting shallow
    }
    return Open("[") + " " + body + " " + Close("]");
  }

  std::string Object(const Json& s, const std::string& path);

  const Json& root_;
  int draft_;
  JsonSchemaOptions o_;
  Rules& rules_;
  bool flexible_ = false;
  std::map<std::string, std::string> ref_rules_;
  std::vector<std::pair<std::string, std::string>> pending_;
};

// A JSON string's content (canonical units) that is none of `names`: a trie over the names'
// code points, one rule per trie node.
std::string KeyNotIn(const std::vector<std::string>& names, Rules& rules) {
  struct TrieNode {
    std::map<char32_t, int> kids;
    bool terminal = false;
  };
  std::vector<TrieNode> trie(1);
  for (const std::string& n : names) {
    int cur = 0;
    for (size_t i = 0; i < n.size();) {
      char32_t cp = 0;
      const int len = DecodeUtf8At(n, i, cp);
      if (len == 0) break;  // names came from parsed JSON: valid UTF-8
      i += static_cast<size_t>(len);
      auto it = trie[cur].kids.find(cp);
      if (it == trie[cur].kids.end()) {
        trie.emplace_back();
        it = trie[cur].kids.emplace(cp, static_cast<int>(trie.size() - 1)).first;
      }
      cur = it->second;
    }
    trie[cur].terminal = true;
  }
  const std::string chr = CharRule(rules);
  std::vector<std::string> name(trie.size());
  for (size_t i = trie.size(); i-- > 0;) {
    std::vector<std::string> alts;
    if (!trie[i].terminal) alts.push_back("\"\"");
    std::vector<std::pair<char32_t, char32_t>> used;
    for (const auto& [cp, kid] : trie[i].kids) used.emplace_back(cp, cp);
    // The complement of `used`.
    std::vector<std::pair<char32_t, char32_t>> comp;
    char32_t next = 0;
    for (auto [a, b] : used) {
      if (a > next) comp.emplace_back(next, a - 1);
      next = b + 1;
    }
    if (next <= 0x10FFFF) comp.emplace_back(next, 0x10FFFF);
    alts.push_back(CodepointSetGbnf(comp) + " " + chr + "*");
    for (const auto& [cp, kid] : trie[i].kids) {
      alts.push_back(CodepointSetGbnf({{cp, cp}}) + " " + name[kid]);
    }
    name[i] = trie[i].kids.empty() && !trie[i].terminal ? chr + "*" : rules.Add("key", Join(alts));
  }
  return name[0];
}

std::string SchemaCompiler::Object(const Json& s, const std::string& path) {
  struct Prop {
    std::string kv;
    bool required = false;
  };
  std::vector<Prop> props;
  std::vector<std::string> names;
  std::set<std::string> required;
  if (s.contains("required")) {
    for (const Json& r : s["required"]) {
      if (!r.is_string()) {
        FailGrammar(ErrorKind::kSyntax, "json schema: {}: required must list strings", path);
      }
      required.insert(r.get<std::string>());
    }
  }
  const Json additional =
      s.contains("additionalProperties") ? s["additionalProperties"] : Json(true);
  auto kv = [&](const std::string& key, const std::string& value) {
    return GbnfLiteral(CanonicalJson(Json(key))) + Colon() + " " + value;
  };
  if (s.contains("properties")) {
    const Json& ps = s["properties"];
    if (!ps.is_object()) {
      FailGrammar(ErrorKind::kSyntax, "json schema: {}: properties must be an object", path);
    }
    for (auto it = ps.begin(); it != ps.end(); ++it) {
      const std::string p = path + "/properties/" + it.key();
      const std::string value = rules_.Add(it.key(), Visit(*it, p));
      props.push_back({kv(it.key(), value), required.count(it.key()) > 0});
      names.push_back(it.key());
    }
  }
  // Required names without a property schema take the additionalProperties schema.
  if (s.contains("required")) {
    for (const Json& r : s["required"]) {
      const std::string k = r.get<std::string>();
      if (std::find(names.begin(), names.end(), k) != names.end()) continue;
      props.push_back(
          {kv(k, rules_.Add(k, Visit(additional, path + "/additionalProperties"))), true});
      names.push_back(k);
    }
  }
  std::string extra;  // one additional key-value pair, or empty when none is allowed
  if (additional != false) {
    const std::string key = "\"\\\"\" " + KeyNotIn(names, rules_) + " \"\\\"\"";
    extra = key + Colon() + " " +
            rules_.Add("additional", Visit(additional, path + "/additionalProperties"));
  }
  const uint64_t cmin = s.contains("minProperties") ? Count(s, "minProperties", path) : 0;
  const bool has_cmax = s.contains("maxProperties");
  const uint64_t cmax = has_cmax ? Count(s, "maxProperties", path) : UINT64_MAX;
  if (cmax < cmin) return std::string(kNothing);
  const uint64_t k = has_cmax ? cmax : cmin;  // counts above k behave alike
  if (k > 64) {
    FailGrammar(ErrorKind::kUnsupported,
                "json schema: {}: minProperties/maxProperties above 64 are not supported", path);
  }
  // S(i, c, first): properties i.. after c emitted (saturating at k); `first`: nothing yet,
  // so no comma. Built from the end, one rule per reachable state.
  const size_t n = props.size();
  std::map<std::tuple<size_t, uint64_t, bool>, std::string> memo;
  auto sep = [&](bool first) { return first ? std::string() : Comma() + " "; };
  auto next_c = [&](uint64_t c) { return std::min(c + 1, k); };
  auto may_add = [&](uint64_t c) { return !has_cmax || c + 1 <= cmax; };
  std::function<std::string(size_t, uint64_t, bool)> state = [&](size_t i, uint64_t c,
                                                                 bool first) -> std::string {
    const auto key = std::make_tuple(i, c, first);
    auto it = memo.find(key);
    if (it != memo.end()) return it->second;
    const std::string name = rules_.Reserve("obj");
    memo[key] = name;  // before the alternatives: the additional-properties state loops
    std::vector<std::string> alts;
    if (i == n) {
      if (!extra.empty() && k == 0 && !has_cmax) {
        alts.push_back(first ? "(" + extra + " (" + Comma() + " " + extra + ")*)?"
                             : "(" + Comma() + " " + extra + ")*");
      } else {
        if (c >= cmin) alts.push_back("\"\"");
        if (!extra.empty() && may_add(c)) {
          alts.push_back(sep(first) + extra + " " + state(n, next_c(c), false));
        }
      }
    } else {
      if (may_add(c))
        alts.push_back(sep(first) + props[i].kv + " " + state(i + 1, next_c(c), false));
      if (!props[i].required) alts.push_back(state(i + 1, c, first));
    }
    rules_.Define(name, alts.empty() ? std::string(kNothing) : Join(alts));
    return name;
  };
  // Fill the states from the end so that the recursion above is at most one level deep.
  for (size_t i = n + 1; i-- > 0;) {
    for (uint64_t c = 0; c <= k; ++c) {
      state(i, c, true);
      state(i, c, false);
    }
  }
  return Open("{") + " " + state(0, 0, true) + " " + Close("}");
}

}  // namespace
}  // namespace json_internal

using json_internal::Json;

std::string JsonSchemaToGbnf(const Json& schema, const JsonSchemaOptions& options) {
  json_internal::CheckDocument(schema, options);
  json_internal::Rules rules(options.rule_prefix);
  const int draft = json_internal::DraftOf(schema, options.default_draft);
  json_internal::SchemaCompiler c(schema, draft, options, rules);
  const std::string root = c.Run();
  return rules.Text(root);
}

std::string JsonSchemaToGbnf(std::string_view text, const JsonSchemaOptions& options) {
  if (text.size() > options.max_schema_bytes) {
    FailGrammar(ErrorKind::kTooLarge, "json schema: the schema is {} bytes; the limit is {} bytes",
                text.size(), options.max_schema_bytes);
  }
  // Nesting depth from the raw text, before a parser builds anything.
  uint32_t depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > options.max_depth) {
        FailGrammar(ErrorKind::kTooLarge, "json schema: nested deeper than {} levels",
                    options.max_depth);
      }
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  Json schema;
  try {
    schema = Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    FailGrammar(ErrorKind::kSyntax, "json schema: not valid JSON: {}", JsonParserMessage(e.what()));
  }
  return JsonSchemaToGbnf(schema, options);
}

std::string JsonObjectGbnf(const JsonSchemaOptions& options) {
  return JsonSchemaToGbnf(Json{{"type", "object"}}, options);
}

}  // namespace crossword::grammar
