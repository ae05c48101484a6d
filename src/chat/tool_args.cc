// Typing of XML tool-call parameter values by the tool's JSON schema (vLLM Qwen3-coder rules,
// never dropping a value), plus the JSON text helpers the streaming parser shares with it.
#include <cmath>
#include <cstdlib>

#include "base/json_gate.h"
#include "base/utf8.h"
#include "chat/output_parser.h"
#include "chat/tool_args_internal.h"

namespace crossword::chat {
namespace {

using Json = nlohmann::ordered_json;

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && IsSpace(s[b])) ++b;
  while (e > b && IsSpace(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Python int(): optional sign, decimal digits with single underscores between them.
bool ParseInt(const std::string& s, int64_t* out) {
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (i >= s.size()) return false;
  int64_t v = 0;
  bool prev_digit = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_' && prev_digit && i + 1 < s.size()) {
      prev_digit = false;
      continue;
    }
    if (c < '0' || c > '9') return false;
    if (__builtin_mul_overflow(v, 10, &v) ||
        __builtin_add_overflow(v, (neg ? -(c - '0') : c - '0'), &v)) {
      return false;
    }
    prev_digit = true;
  }
  *out = v;
  return prev_digit;
}

// Python float() on finite decimal text ("2.50", "1e3", "-.5"); rejects inf/nan and hex.
bool ParseFloat(const std::string& s, double* out) {
  if (s.empty()) return false;
  std::string clean;
  for (char c : s) {
    if (c == '_') continue;
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' ||
          c == '+' || c == '-')) {
      return false;
    }
    clean.push_back(c);
  }
  char* end = nullptr;
  double v = std::strtod(clean.c_str(), &end);
  if (!end || *end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

// A number as JSON: integral values within int64 become integers (vLLM's rule for "number").
Json NumberJson(double v) {
  if (std::floor(v) == v && std::fabs(v) < 9.2e18) return static_cast<int64_t>(v);
  return v;
}

// Python literal (dict/list/tuple/str/number/True/False/None) -> JSON, for models that write
// Python reprs instead of JSON.
class PyLiteral {
 public:
  explicit PyLiteral(std::string_view s) : s_(s) {}
  bool Parse(Json* out) {
    if (!Value(out, 0)) return false;
    Ws();
    return i_ == s_.size();
  }

 private:
  void Ws() {
    while (i_ < s_.size() && IsSpace(s_[i_])) ++i_;
  }
  bool Eat(char c) {
    Ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool Value(Json* out, int depth) {
    if (depth > 256) return false;
    Ws();
    if (i_ >= s_.size()) return false;
    char c = s_[i_];
    if (c == '{') {
      ++i_;
      *out = Json::object();
      while (!Eat('}')) {
        if (!out->empty() && !Eat(',')) return false;
        if (Eat('}')) break;
        Json key;
        if (!Value(&key, depth + 1) || !Eat(':')) return false;
        Json val;
        if (!Value(&val, depth + 1)) return false;
        (*out)[key.is_string() ? key.get<std::string>() : key.dump()] = std::move(val);
      }
      return true;
    }
    if (c == '[' || c == '(') {
      char close = c == '[' ? ']' : ')';
      ++i_;
      *out = Json::array();
      while (!Eat(close)) {
        if (!out->empty() && !Eat(',')) return false;
        if (Eat(close)) break;
        Json val;
        if (!Value(&val, depth + 1)) return false;
        out->push_back(std::move(val));
      }
      return true;
    }
    if (c == '\'' || c == '"') return String(out);
    for (auto [word, value] :
         {std::pair<std::string_view, Json>{"True", true}, {"False", false}, {"None", nullptr}}) {
      if (s_.substr(i_, word.size()) == word) {
        i_ += word.size();
        *out = value;
        return true;
      }
    }
    size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' ||
                              s_[i_] == '+' || s_[i_] == '-' || s_[i_] == '_')) {
      ++i_;
    }
    std::string num(s_.substr(start, i_ - start));
    int64_t iv;
    double dv;
    if (ParseInt(num, &iv)) {
      *out = iv;
    } else if (ParseFloat(num, &dv)) {
      *out = dv;
    } else {
      return false;
    }
    return true;
  }
  bool String(Json* out) {
    char q = s_[i_++];
    std::string v;
    while (i_ < s_.size() && s_[i_] != q) {
      char c = s_[i_++];
      if (c != '\\') {
        v.push_back(c);
        continue;
      }
      if (i_ >= s_.size()) return false;
      char e = s_[i_++];
      switch (e) {
        case 'n':
          v.push_back('\n');
          break;
        case 't':
          v.push_back('\t');
          break;
        case 'r':
          v.push_back('\r');
          break;
        case '\\':
          v.push_back('\\');
          break;
        case '\'':
          v.push_back('\'');
          break;
        case '"':
          v.push_back('"');
          break;
        default:
          v.push_back('\\');
          v.push_back(e);
      }
    }
    if (i_ >= s_.size()) return false;
    ++i_;
    *out = SanitizeUtf8(v);
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
};

// The declared type of a parameter schema: "type" as a string, or the first non-null entry of a
// type list, or of anyOf/oneOf alternatives; "" when none is declared.
std::string DeclaredType(const Json& schema) {
  if (!schema.is_object()) return "";
  auto pick = [](const Json& t) -> std::string {
    if (t.is_string()) return Lower(Trim(t.get<std::string>()));
    if (t.is_array()) {
      for (const Json& e : t) {
        if (e.is_string() && Lower(e.get<std::string>()) != "null")
          return Lower(Trim(e.get<std::string>()));
      }
    }
    return "";
  };
  if (schema.contains("type")) return pick(schema["type"]);
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key) || !schema[key].is_array()) continue;
    for (const Json& alt : schema[key]) {
      std::string t = alt.is_object() && alt.contains("type") ? pick(alt["type"]) : "";
      if (!t.empty()) return t;
    }
  }
  return "";
}

bool StartsWith(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }

}  // namespace

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp = 0;
    const int len = DecodeUtf8At(s, i, cp);
    if (len != 0) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for each invalid byte
      ++i;
    }
  }
  return out;
}

size_t IncompleteUtf8Tail(std::string_view s) {
  // A trailing lead byte plus fewer continuation bytes than it announces may still complete.
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    auto b = static_cast<unsigned char>(s[s.size() - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    int len = (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
    return len > static_cast<int>(back) ? back : 0;
  }
  return 0;
}

std::string JsonEscape(std::string_view s) {
  // Matches nlohmann::json::dump() on valid UTF-8: escapes " \ and control characters only.
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(ch);
        }
    }
  }
  return out;
}

bool IsStringType(const Json* schema) {
  if (!schema) return true;
  std::string t = DeclaredType(*schema);
  return t.empty() || t == "string" || t == "str" || t == "text" || t == "varchar" || t == "char" ||
         t == "enum";
}

Json TypeParameterValue(const std::string& raw, const Json* schema) {
  if (IsStringType(schema)) return SanitizeUtf8(raw);
  std::string type = DeclaredType(*schema);
  std::string text = Trim(raw);
  std::string lower = Lower(text);
  if (lower == "null" || lower == "none") return nullptr;
  if (StartsWith(type, "int") || StartsWith(type, "uint") || StartsWith(type, "long") ||
      StartsWith(type, "short") || StartsWith(type, "unsigned")) {
    int64_t iv;
    double dv;
    if (ParseInt(text, &iv)) return iv;
    if (ParseFloat(text, &dv) && std::floor(dv) == dv && std::fabs(dv) < 9.2e18)
      return static_cast<int64_t>(dv);
    return SanitizeUtf8(raw);
  }
  if (StartsWith(type, "num") || StartsWith(type, "float") || StartsWith(type, "double")) {
    double dv;
    if (ParseFloat(text, &dv)) return NumberJson(dv);
    return SanitizeUtf8(raw);
  }
  if (type == "boolean" || type == "bool" || type == "binary") {
    if (lower == "true" || lower == "false") return lower == "true";
    return SanitizeUtf8(raw);
  }
  // Untrusted model output: too deep a value stays a string rather than a DOM a dump() recurses on.
  Json parsed = JsonLimitError(text) ? Json(Json::value_t::discarded)
                                     : Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_discarded()) return parsed;
  if (PyLiteral(text).Parse(&parsed)) return parsed;
  return SanitizeUtf8(raw);
}

const Json* FindParameterSchema(const Json& tools, const std::string& function,
                                const std::string& parameter) {
  if (!tools.is_array()) return nullptr;
  for (const Json& tool : tools) {
    const Json* fn = &tool;
    if (tool.is_object() && tool.contains("function") && tool["function"].is_object())
      fn = &tool["function"];
    if (!fn->is_object() || !fn->contains("name") || (*fn)["name"] != function) continue;
    if (!fn->contains("parameters") || !(*fn)["parameters"].is_object()) return nullptr;
    const Json& params = (*fn)["parameters"];
    if (!params.contains("properties") || !params["properties"].is_object()) return nullptr;
    auto it = params["properties"].find(parameter);
    return it == params["properties"].end() ? nullptr : &*it;
  }
  return nullptr;
}

std::string ToolCall::ArgumentsJson() const {
  return arguments.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace crossword::chat
