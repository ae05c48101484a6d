// JSON Schema compiler: keyword classes, `$ref` resolution, normalization (Flatten) and the
// exact merging of `allOf` branches into one schema; the disjointness test `oneOf` needs.
#include "grammar/json_merge.h"

#include <algorithm>
#include <set>

#include "grammar/json_schema.h"

namespace crossword::grammar::json_internal {
namespace {

enum class Kw { kAssertion, kAnnotation, kContainer, kUnsupported };

Kw KeywordClass(std::string_view k) {
  static const std::set<std::string_view> assertions = {"type",
                                                        "enum",
                                                        "const",
                                                        "properties",
                                                        "required",
                                                        "additionalProperties",
                                                        "minProperties",
                                                        "maxProperties",
                                                        "items",
                                                        "prefixItems",
                                                        "additionalItems",
                                                        "minItems",
                                                        "maxItems",
                                                        "uniqueItems",
                                                        "minLength",
                                                        "maxLength",
                                                        "pattern",
                                                        "format",
                                                        "minimum",
                                                        "maximum",
                                                        "exclusiveMinimum",
                                                        "exclusiveMaximum",
                                                        "anyOf",
                                                        "oneOf",
                                                        "allOf",
                                                        "$ref",
                                                        "nullable",
                                                        "patternProperties",
                                                        "dependencies"};
  static const std::set<std::string_view> annotations = {
      "$schema",    "$comment", "title",     "description",      "default",         "examples",
      "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "$vocabulary"};
  if (assertions.count(k)) return Kw::kAssertion;
  if (annotations.count(k)) return Kw::kAnnotation;
  if (k == "$defs" || k == "definitions") return Kw::kContainer;
  return Kw::kUnsupported;
}

bool IsTrue(const Json& s) {
  return (s.is_boolean() && s.get<bool>()) || (s.is_object() && s.empty());
}

// The schema `a` ∧ `b` for subschemas kept as they are (a wrapper when both constrain).
Json Both(const Json& a, const Json& b) {
  if (IsTrue(a)) return b;
  if (IsTrue(b)) return a;
  return Json{{"allOf", Json::array({a, b})}};
}

std::set<std::string> TypeSet(const Json& s) {
  std::set<std::string> t;
  if (!s.contains("type")) return {"null", "boolean", "object", "array", "string", "number"};
  const Json& ty = s["type"];
  if (ty.is_string()) {
    t.insert(ty.get<std::string>());
  } else {
    for (const Json& x : ty) t.insert(x.get<std::string>());
  }
  if (t.count("number")) t.erase("integer");
  return t;
}

Json TypesToJson(const std::set<std::string>& t) {
  if (t.size() == 1) return *t.begin();
  Json a = Json::array();
  for (const auto& x : t) a.push_back(x);
  return a;
}

// Array items in a normal form: prefix schemas and the schema of the rest.
void Items(const Json& s, std::vector<Json>& prefix, Json& rest) {
  prefix.clear();
  rest = true;
  if (s.contains("prefixItems")) {
    for (const Json& x : s["prefixItems"]) prefix.push_back(x);
    if (s.contains("items")) rest = s["items"];
  } else if (s.contains("items") && s["items"].is_array()) {
    for (const Json& x : s["items"]) prefix.push_back(x);
    if (s.contains("additionalItems")) rest = s["additionalItems"];
  } else if (s.contains("items")) {
    rest = s["items"];
  }
}

double Num(const Json& v) { return v.get<double>(); }

}  // namespace

void CheckKeywords(const Json& s, const std::string& path, bool is_root) {
  if (!s.is_object()) {
    FailGrammar(ErrorKind::kSyntax, "json schema: {}: a schema must be an object or a boolean",
                path);
  }
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    if (k == "$id" || k == "id") {
      if (is_root) continue;
      FailGrammar(ErrorKind::kUnsupported,
                  "json schema: {}: keyword '{}' inside a subschema is not supported", path, k);
    }
    switch (KeywordClass(k)) {
      case Kw::kAssertion:
      case Kw::kAnnotation:
      case Kw::kContainer:
        break;
      case Kw::kUnsupported:
        FailGrammar(ErrorKind::kUnsupported, "json schema: {}: keyword '{}' is not supported", path,
                    k);
    }
  }
  // Keywords supported only in their trivial form.
  auto empty_object = [&](const char* k) {
    if (s.contains(k) && !(s[k].is_object() && s[k].empty())) {
      FailGrammar(ErrorKind::kUnsupported, "json schema: {}: keyword '{}' is not supported", path,
                  k);
    }
  };
  empty_object("patternProperties");
  empty_object("dependencies");
  if (s.contains("uniqueItems") && s["uniqueItems"] != false) {
    FailGrammar(ErrorKind::kUnsupported,
                "json schema: {}: keyword 'uniqueItems' (true) is not supported", path);
  }
}

bool HasAssertions(const Json& s, std::initializer_list<std::string_view> except) {
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    if (std::find(except.begin(), except.end(), k) != except.end()) continue;
    if (KeywordClass(k) == Kw::kAssertion) return true;
  }
  return false;
}

const Json& ResolveRef(const Json& root, const std::string& ref, const std::string& path) {
  if (ref.empty() || ref[0] != '#') {
    FailGrammar(ErrorKind::kUnsupported,
                "json schema: {}: $ref '{}' is not supported (only references inside the schema "
                "document, '#/...')",
                path, ref);
  }
  if (ref.size() > 1 && ref[1] != '/') {
    FailGrammar(ErrorKind::kUnsupported,
                "json schema: {}: $ref '{}' names an anchor; only JSON pointers are supported",
                path, ref);
  }
  const Json* cur = &root;
  size_t i = 1;
  while (i < ref.size()) {
    size_t j = ref.find('/', i + 1);
    if (j == std::string::npos) j = ref.size();
    std::string tok;
    for (size_t k = i + 1; k < j; ++k) {  // ~0 ~1 and %XX
      if (ref[k] == '~' && k + 1 < j && (ref[k + 1] == '0' || ref[k + 1] == '1')) {
        tok.push_back(ref[k + 1] == '0' ? '~' : '/');
        ++k;
      } else if (ref[k] == '%' && k + 2 < j &&
                 std::isxdigit(static_cast<unsigned char>(ref[k + 1])) &&
                 std::isxdigit(static_cast<unsigned char>(ref[k + 2]))) {
        tok.push_back(static_cast<char>(std::stoi(ref.substr(k + 1, 2), nullptr, 16)));
        k += 2;
      } else {
        tok.push_back(ref[k]);
      }
    }
    if (cur->is_object() && cur->contains(tok)) {
      cur = &(*cur)[tok];
    } else if (cur->is_array() && !tok.empty() &&
               std::all_of(tok.begin(), tok.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
               tok.size() < 9 && std::stoul(tok) < cur->size()) {
      cur = &(*cur)[std::stoul(tok)];
    } else {
      FailGrammar(ErrorKind::kSyntax, "json schema: {}: $ref '{}' points to nothing", path, ref);
    }
    i = j;
  }
  return *cur;
}

Json Flatten(const Json& root, const Json& schema, const std::string& path, int draft,
             int ref_budget) {
  if (schema.is_boolean())
    return schema.get<bool>() ? Json::object() : Json{{"enum", Json::array()}};
  CheckKeywords(schema, path, &schema == &root);
  Json s = schema;
  if (s.contains("$ref")) {
    if (ref_budget <= 0) {
      FailGrammar(ErrorKind::kUnsupported,
                  "json schema: {}: $ref chain too long to combine (a reference cycle through "
                  "allOf or sibling keywords?)",
                  path);
    }
    const std::string ref = s["$ref"].is_string() ? s["$ref"].get<std::string>() : "";
    const Json& target = ResolveRef(root, ref, path);
    Json t = Flatten(root, target, ref, draft, ref_budget - 1);
    if (draft < 2019) return t;  // draft-07 and older: siblings of $ref are ignored
    s.erase("$ref");
    s = MergeSchemas(root, t, Flatten(root, s, path, draft, ref_budget - 1), path, draft,
                     ref_budget - 1);
  }
  if (s.contains("nullable")) {
    if (s["nullable"] == true && s.contains("type")) {
      std::set<std::string> t = TypeSet(s);
      t.insert("null");
      s["type"] = TypesToJson(t);
    }
    s.erase("nullable");
  }
  if (s.contains("const")) {
    Json e = Json::array({s["const"]});
    s.erase("const");
    s = MergeSchemas(root, s, Json{{"enum", e}}, path, draft, ref_budget);
  }
  // draft-04 boolean exclusiveMinimum/exclusiveMaximum -> the numeric form.
  for (const char* bound : {"Minimum", "Maximum"}) {
    const std::string ex = std::string("exclusive") + bound;
    const std::string plain = bound[1] == 'i' ? "minimum" : "maximum";
    if (s.contains(ex) && s[ex].is_boolean()) {
      if (s[ex].get<bool>() && s.contains(plain)) {
        s[ex] = s[plain];
        s.erase(plain);
      } else {
        s.erase(ex);
      }
    }
  }
  if (s.contains("allOf")) {
    Json branches = s["allOf"];
    s.erase("allOf");
    size_t i = 0;
    for (const Json& b : branches) {
      const std::string p = path + "/allOf/" + std::to_string(i++);
      s = MergeSchemas(root, s, Flatten(root, b, p, draft, ref_budget - 1), path, draft,
                       ref_budget - 1);
    }
  }
  return s;
}

Json MergeSchemas(const Json& root, const Json& a0, const Json& b0, const std::string& path,
                  int draft, int ref_budget) {
  const Json a = a0.is_object() && !a0.contains("$ref") && !a0.contains("allOf")
                     ? a0
                     : Flatten(root, a0, path, draft, ref_budget);
  const Json b = b0.is_object() && !b0.contains("$ref") && !b0.contains("allOf")
                     ? b0
                     : Flatten(root, b0, path, draft, ref_budget);
  Json m = Json::object();
  auto unsupported = [&](std::string_view what) {
    FailGrammar(ErrorKind::kUnsupported, "json schema: {}: allOf combining {} is not supported",
                path, what);
  };
  // type
  if (a.contains("type") || b.contains("type")) {
    std::set<std::string> ta = TypeSet(a), tb = TypeSet(b), t;
    for (const auto& x : ta) {
      if (tb.count(x)) t.insert(x);
      if (x == "number" && tb.count("integer")) t.insert("integer");
      if (x == "integer" && tb.count("number")) t.insert("integer");
    }
    m["type"] = t.empty() ? Json::array() : TypesToJson(t);
  }
  // enum
  if (a.contains("enum") || b.contains("enum")) {
    if (a.contains("enum") && b.contains("enum")) {
      Json e = Json::array();
      for (const Json& x : a["enum"]) {
        for (const Json& y : b["enum"]) {
          if (CanonicalJson(x) == CanonicalJson(y)) {
            e.push_back(x);
            break;
          }
        }
      }
      m["enum"] = e;
    } else {
      m["enum"] = a.contains("enum") ? a["enum"] : b["enum"];
    }
  }
  // objects
  if (a.contains("properties") || b.contains("properties") || a.contains("additionalProperties") ||
      b.contains("additionalProperties")) {
    const Json none = Json::object();
    const Json& pa = a.contains("properties") ? a["properties"] : none;
    const Json& pb = b.contains("properties") ? b["properties"] : none;
    const Json ta = a.contains("additionalProperties") ? a["additionalProperties"] : Json(true);
    const Json tb = b.contains("additionalProperties") ? b["additionalProperties"] : Json(true);
    Json props = Json::object();
    for (auto it = pa.begin(); it != pa.end(); ++it) {
      props[it.key()] = Both(*it, pb.contains(it.key()) ? pb[it.key()] : tb);
    }
    for (auto it = pb.begin(); it != pb.end(); ++it) {
      if (!pa.contains(it.key())) props[it.key()] = Both(ta, *it);
    }
    if (!props.empty()) m["properties"] = props;
    const Json add = Both(ta, tb);
    if (!IsTrue(add)) m["additionalProperties"] = add;
  }
  if (a.contains("required") || b.contains("required")) {
    Json r = Json::array();
    for (const Json* src : {&a, &b}) {
      if (!src->contains("required")) continue;
      for (const Json& x : (*src)["required"]) {
        if (std::find(r.begin(), r.end(), x) == r.end()) r.push_back(x);
      }
    }
    m["required"] = r;
  }
  // arrays
  if (a.contains("items") || b.contains("items") || a.contains("prefixItems") ||
      b.contains("prefixItems")) {
    std::vector<Json> xa, xb;
    Json ra, rb;
    Items(a, xa, ra);
    Items(b, xb, rb);
    Json prefix = Json::array();
    for (size_t i = 0; i < std::max(xa.size(), xb.size()); ++i) {
      prefix.push_back(Both(i < xa.size() ? xa[i] : ra, i < xb.size() ? xb[i] : rb));
    }
    if (!prefix.empty()) m["prefixItems"] = prefix;
    const Json rest = Both(ra, rb);
    if (!IsTrue(rest)) m["items"] = rest;
  }
  // numeric and length bounds: the stricter one
  for (const char* k : {"minItems", "minLength", "minProperties"}) {
    if (a.contains(k) || b.contains(k)) {
      m[k] = std::max(a.value(k, Json(0)).get<double>(), b.value(k, Json(0)).get<double>());
    }
  }
  for (const char* k : {"maxItems", "maxLength", "maxProperties"}) {
    if (a.contains(k) && b.contains(k)) {
      m[k] = std::min(Num(a[k]), Num(b[k]));
    } else if (a.contains(k) || b.contains(k)) {
      m[k] = a.contains(k) ? a[k] : b[k];
    }
  }
  // Lower bound: the larger value; at equal values the exclusive one.
  auto bound = [&](const char* plain, const char* ex, bool lower) {
    const Json* best = nullptr;
    bool best_ex = false;
    for (const Json* s : {&a, &b}) {
      for (bool exclusive : {false, true}) {
        const char* k = exclusive ? ex : plain;
        if (!s->contains(k)) continue;
        const Json& v = (*s)[k];
        const bool better = best == nullptr ||
                            (lower ? Num(v) > Num(*best) : Num(v) < Num(*best)) ||
                            (Num(v) == Num(*best) && exclusive && !best_ex);
        if (better) {
          best = &v;
          best_ex = exclusive;
        }
      }
    }
    if (best) m[best_ex ? ex : plain] = *best;
  };
  bound("minimum", "exclusiveMinimum", true);
  bound("maximum", "exclusiveMaximum", false);
  for (const char* k : {"pattern", "format"}) {
    if (a.contains(k) && b.contains(k) && a[k] != b[k]) unsupported(std::string("two ") + k + "s");
    if (a.contains(k) || b.contains(k)) m[k] = a.contains(k) ? a[k] : b[k];
  }
  // anyOf: distributes (the product of both lists); oneOf: one side only.
  if (a.contains("anyOf") && b.contains("anyOf")) {
    if (a["anyOf"].size() * b["anyOf"].size() > 64) unsupported("two large anyOf lists");
    Json any = Json::array();
    for (const Json& x : a["anyOf"]) {
      for (const Json& y : b["anyOf"]) any.push_back(Both(x, y));
    }
    m["anyOf"] = any;
  } else if (a.contains("anyOf") || b.contains("anyOf")) {
    m["anyOf"] = a.contains("anyOf") ? a["anyOf"] : b["anyOf"];
  }
  if (a.contains("oneOf") && b.contains("oneOf")) unsupported("two oneOf lists");
  if (a.contains("oneOf") || b.contains("oneOf"))
    m["oneOf"] = a.contains("oneOf") ? a["oneOf"] : b["oneOf"];
  return m;
}

bool ProvablyDisjoint(const Json& a, const Json& b) {
  std::set<std::string> ta = TypeSet(a), tb = TypeSet(b);
  auto enum_types = [](const Json& s, std::set<std::string>& t) {
    if (!s.contains("enum")) return;
    std::set<std::string> from;
    for (const Json& v : s["enum"]) {
      from.insert(v.is_null()      ? "null"
                  : v.is_boolean() ? "boolean"
                  : v.is_object()  ? "object"
                  : v.is_array()   ? "array"
                  : v.is_string()  ? "string"
                                   : "number");
    }
    std::set<std::string> both;
    for (const auto& x : t) {
      if (from.count(x) || (x == "integer" && from.count("number"))) both.insert(x);
    }
    t = both;
  };
  enum_types(a, ta);
  enum_types(b, tb);
  bool overlap = false;
  for (const auto& x : ta) {
    if (tb.count(x) || (x == "integer" && tb.count("number")) ||
        (x == "number" && tb.count("integer"))) {
      overlap = true;
    }
  }
  if (!overlap) return true;
  if (a.contains("enum") && b.contains("enum")) {
    std::set<std::string> va;
    for (const Json& v : a["enum"]) va.insert(CanonicalJson(v));
    for (const Json& v : b["enum"]) {
      if (va.count(CanonicalJson(v))) return false;
    }
    return true;
  }
  // Objects told apart by a required property with disjoint enums (a discriminator); only
  // objects can then overlap.
  if (ta == std::set<std::string>{"object"} && tb == ta && a.contains("properties") &&
      b.contains("properties") && a.contains("required") && b.contains("required")) {
    for (auto it = a["properties"].begin(); it != a["properties"].end(); ++it) {
      const Json key(it.key());
      const auto& ra = a["required"];
      const auto& rb = b["required"];
      if (std::find(ra.begin(), ra.end(), key) == ra.end() ||
          std::find(rb.begin(), rb.end(), key) == rb.end() || !b["properties"].contains(it.key())) {
        continue;
      }
      const Json& x = *it;
      const Json& y = b["properties"][it.key()];
      if (x.is_object() && y.is_object() && (x.contains("enum") || x.contains("const")) &&
          (y.contains("enum") || y.contains("const"))) {
        Json xe = x.contains("enum") ? x["enum"] : Json::array({x["const"]});
        Json ye = y.contains("enum") ? y["enum"] : Json::array({y["const"]});
        if (ProvablyDisjoint(Json{{"enum", xe}}, Json{{"enum", ye}})) return true;
      }
    }
  }
  return false;
}

}  // namespace crossword::grammar::json_internal
