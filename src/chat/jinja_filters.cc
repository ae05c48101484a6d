// Jinja2 filters and tests (jinja2/filters.py, jinja2/tests.py semantics) plus HF's tojson
// (json.dumps with ensure_ascii=False). Generators (map, select, items, ...) become lists.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_set>

#include "base/error.h"
#include "base/markup.h"
#include "chat/jinja_interp.h"
#include "chat/jinja_strings.h"

namespace crossword::chat::jinja {
namespace {

std::string Str(const Value& v) { return ToPyStr(v); }

// Sort key with Jinja's case_sensitive=False behaviour (strings compared lower-cased).
Value SortKey(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.IsString() ? Value(PyLower(v.str())) : v;
}

// Python int(str): optional sign, digits with single underscores, surrounding whitespace.
bool ParsePyInt(const std::string& s, int64_t base, int64_t* out) {
  std::string t = PyStrip(s, None{}, true, true);
  size_t i = 0;
  bool neg = false;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
  if (i >= t.size()) return false;
  // Python accepts the 0x/0o/0b prefix matching the base, and detects it for base 0.
  if (i + 1 < t.size() && t[i] == '0') {
    char p = static_cast<char>(std::tolower(static_cast<unsigned char>(t[i + 1])));
    int64_t prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefixed && (base == 0 || base == prefixed)) {
      base = prefixed;
      i += 2;
      if (i < t.size() && t[i] == '_') ++i;
    } else if (base == 0) {
      // Base 0 without prefix: only zeros may start with '0'.
      if (t.find_first_not_of("0_", i) != std::string::npos) return false;
      base = 10;
    }
  }
  if (base == 0) base = 10;
  if (base < 2 || base > 36) return false;
  int64_t v = 0;
  bool prev_digit = false;
  for (; i < t.size(); ++i) {
    char c = t[i];
    if (c == '_' && prev_digit && i + 1 < t.size()) {
      prev_digit = false;
      continue;
    }
    int d = std::isdigit(static_cast<unsigned char>(c))   ? c - '0'
            : std::isalpha(static_cast<unsigned char>(c)) ? std::tolower(c) - 'a' + 10
                                                          : 99;
    if (d >= base) return false;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return false;
    prev_digit = true;
  }
  if (!prev_digit) return false;
  *out = neg ? -v : v;
  return true;
}

bool ParsePyFloat(const std::string& s, double* out) {
  std::string t = PyStrip(s, None{}, true, true);
  if (t.empty()) return false;
  std::string clean;
  for (char c : t) {
    if (c != '_') clean.push_back(c);
  }
  std::string lower = PyLower(clean);
  const char* p = lower.c_str();
  if (*p == '+' || *p == '-') ++p;
  if (std::string_view(p) == "inf" || std::string_view(p) == "infinity" ||
      std::string_view(p) == "nan") {
    double v = std::string_view(p) == "nan" ? NAN : INFINITY;
    *out = lower[0] == '-' ? -v : v;
    return true;
  }
  if (lower.find_first_of("xp") != std::string::npos) return false;  // no hex floats in Python
  char* end = nullptr;
  *out = std::strtod(clean.c_str(), &end);
  return end && *end == '\0';
}

Value RoundCommon(double v, int64_t precision) {
  if (precision == 0) return std::nearbyint(v);
  if (precision > 300 || precision < -300) return v;
  char buf[400];
  if (precision > 0) {
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), v);
    return std::strtod(buf, nullptr);
  }
  double scale = std::pow(10.0, static_cast<double>(-precision));
  return std::nearbyint(v / scale) * scale;
}

Value Tojson(const Value& v, CallArgs& args) {
  Bound b = Bind("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions o;
  o.ensure_ascii = b.has(0) && b[0].Truthy();
  o.sort_keys = b.has(3) && b[3].Truthy();
  if (b.has(1) && !b[1].IsNone()) {
    o.has_indent = true;
    if (b[1].IsString()) {
      o.indent_string = b[1].str();
    } else {
      int64_t n = ToInt(b[1], "tojson indent");
      o.indent_string = std::string(static_cast<size_t>(std::clamp<int64_t>(n, 0, 64)), ' ');
    }
    o.item_separator = ",";
  }
  if (b.has(2) && !b[2].IsNone()) {
    std::vector<Value> seps = Iterate(b[2]);
    if (seps.size() != 2 || !seps[0].IsString() || !seps[1].IsString()) {
      Fail("tojson: separators must be a pair of strings");
    }
    o.item_separator = seps[0].str();
    o.key_separator = seps[1].str();
  }
  return PyJsonDumps(v, o);
}

std::vector<Value> SelectOrReject(Interpreter& in, const Value& v, CallArgs& args, bool select,
                                  bool by_attr) {
  std::vector<Value> rest = args.positional;
  Value attr;
  if (by_attr) {
    if (rest.empty()) Fail("{}attr: missing attribute name", select ? "select" : "reject");
    attr = rest.front();
    rest.erase(rest.begin());
  }
  std::string test;
  if (!rest.empty()) {
    if (!rest.front().IsString()) Fail("select/reject: the test name must be a string");
    test = rest.front().str();
    rest.erase(rest.begin());
  }
  std::vector<Value> out;
  if (!v.Truthy()) return out;  // Jinja iterates only `if value:`
  for (const Value& item : Iterate(v)) {
    Value subject = by_attr ? GetPath(item, attr) : item;
    bool ok;
    if (test.empty()) {
      ok = subject.Truthy();
    } else {
      CallArgs targs;
      targs.positional = rest;
      targs.keyword = args.keyword;
      ok = ApplyTest(in, test, subject, targs);
    }
    if (ok == select) out.push_back(item);
  }
  return out;
}

Value MinMax(const Value& v, CallArgs& args, bool want_max) {
  Bound b = Bind(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  bool cs = b.has(0) && b[0].Truthy();
  std::vector<Value> items = Iterate(v);
  if (items.empty()) return Undefined{"No aggregated item, sequence was empty."};
  size_t best = 0;
  auto key = [&](const Value& x) { return SortKey(b.has(1) ? GetPath(x, b[1]) : x, cs); };
  for (size_t i = 1; i < items.size(); ++i) {
    bool better = want_max ? PyLess(key(items[best]), key(items[i]))
                           : PyLess(key(items[i]), key(items[best]));
    if (better) best = i;
  }
  return items[best];
}

std::string Indent(const std::string& s, const Value& width, bool first, bool blank) {
  std::string ind = width.IsString() ? width.str()
                                     : std::string(static_cast<size_t>(std::clamp<int64_t>(
                                                       ToInt(width, "indent width"), 0, 1024)),
                                                   ' ');
  std::vector<std::string> lines = PySplitLines(s + "\n", false);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind) + lines[i];
  }
  return first ? ind + rv : rv;
}

int64_t PyLength(const Value& v) {
  if (v.IsString()) return static_cast<int64_t>(PyLen(v.str()));
  if (v.IsList()) return static_cast<int64_t>(v.list().items.size());
  if (v.IsMapping()) return static_cast<int64_t>(v.dict().size());
  if (v.IsUndefined()) return 0;
  Fail("object of type '{}' has no len()", v.TypeName());
}

// Jinja's `title` filter: capitalizes each word split at whitespace and -({[< characters.
std::string JinjaTitle(const std::string& s) {
  auto cps = DecodeUtf8(s);
  std::string out;
  bool word_start = true;
  for (char32_t c : cps) {
    bool sep = IsPySpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    std::string one;
    AppendUtf8(one, c);
    out += sep ? one : word_start ? PyUpper(one) : PyLower(one);
    word_start = sep;
  }
  return out;
}

std::string Truncate(const std::string& s, CallArgs& args) {
  Bound b = Bind("truncate", args, {"length", "killwords", "end", "leeway"});
  int64_t length = b.has(0) ? ToInt(b[0], "truncate length") : 255;
  std::string end = b.has(2) ? Str(b[2]) : "...";
  int64_t leeway = b.has(3) && !b[3].IsNone() ? ToInt(b[3], "truncate leeway") : 5;
  int64_t end_len = static_cast<int64_t>(PyLen(end));
  if (length < end_len) Fail("truncate: expected length >= {}, got {}", end_len, length);
  if (leeway < 0) Fail("truncate: expected leeway >= 0, got {}", leeway);
  auto cps = DecodeUtf8(s);
  if (static_cast<int64_t>(cps.size()) <= length + leeway) return s;
  std::string head = EncodeUtf8(cps, 0, static_cast<size_t>(length - end_len));
  if (b.has(1) && b[1].Truthy()) return head + end;
  return PySplit(head, Value(" "), 1, true)[0] + end;
}

const std::unordered_set<std::string>& FilterNames() {
  static const std::unordered_set<std::string> names = {
      "abs",     "attr",     "batch", "capitalize", "center", "count",      "d",
      "default", "dictsort", "e",     "escape",     "first",  "float",      "forceescape",
      "format",  "indent",   "int",   "items",      "join",   "last",       "length",
      "list",    "lower",    "map",   "max",        "min",    "reject",     "rejectattr",
      "replace", "reverse",  "round", "safe",       "select", "selectattr", "sort",
      "string",  "sum",      "title", "tojson",     "trim",   "truncate",   "unique",
      "upper",   "wordcount"};
  return names;
}

const std::unordered_set<std::string>& TestNames() {
  static const std::unordered_set<std::string> names = {
      "boolean", "callable", "defined",  "divisibleby", "eq",       "equalto",     "escaped",
      "even",    "false",    "filter",   "float",       "ge",       "greaterthan", "gt",
      "in",      "integer",  "iterable", "le",          "lessthan", "lower",       "lt",
      "mapping", "ne",       "none",     "number",      "odd",      "sameas",      "sequence",
      "string",  "test",     "true",     "undefined",   "upper",    "==",          "!=",
      "<",       "<=",       ">",        ">="};
  return names;
}

}  // namespace

Value ApplyFilter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args) {
  auto no_args = [&]() {
    if (!args.positional.empty() || !args.keyword.empty())
      Fail("filter '{}' takes no arguments", name);
  };
  auto text = [&]() { return Str(v); };
  if (name == "length" || name == "count") {
    no_args();
    return PyLength(v);
  }
  if (name == "string") {
    no_args();
    return text();
  }
  if (name == "safe") {
    no_args();
    return v.IsString() ? v : Value(text());
  }
  if (name == "e" || name == "escape" || name == "forceescape") {
    no_args();
    return HtmlEscape(text());
  }
  if (name == "lower" || name == "upper" || name == "capitalize" || name == "title") {
    no_args();
    std::string s = text();
    return name == "lower"        ? PyLower(s)
           : name == "upper"      ? PyUpper(s)
           : name == "capitalize" ? PyCapitalize(s)
                                  : JinjaTitle(s);
  }
  if (name == "trim") {
    Bound b = Bind("trim", args, {"chars"});
    return PyStrip(text(), b.Or(0, None{}), true, true);
  }
  if (name == "default" || name == "d") {
    Bound b = Bind("default", args, {"default_value", "boolean"});
    bool use_default = v.IsUndefined() || (b.has(1) && b[1].Truthy() && !v.Truthy());
    return use_default ? b.Or(0, Value(std::string())) : v;
  }
  if (name == "tojson") return Tojson(v, args);
  if (name == "join") {
    Bound b = Bind("join", args, {"d", "attribute"});
    std::string sep = b.has(0) ? Str(b[0]) : "";
    std::string out;
    size_t i = 0;
    for (const Value& item : Iterate(v)) {
      if (i++) out += sep;
      out += Str(b.has(1) ? GetPath(item, b[1]) : item);
      if (out.size() > in.limits().max_string_bytes)
        Fail("join: result exceeds the string size limit");
    }
    return out;
  }
  if (name == "items") {
    no_args();
    if (v.IsUndefined()) return Value::MakeList({});
    if (!v.IsMapping()) Fail("Can only get item pairs from a mapping (got {}).", v.TypeName());
    std::vector<Value> out;
    for (const auto& [k, val] : v.dict().entries())
      out.push_back(Value::MakeList({Value(k), val}, true));
    return Value::MakeList(std::move(out));
  }
  if (name == "dictsort") {
    Bound b = Bind("dictsort", args, {"case_sensitive", "by", "reverse"});
    if (!v.IsMapping()) Fail("dictsort: expected a mapping, got {}", v.TypeName());
    bool cs = b.has(0) && b[0].Truthy();
    std::string by = b.has(1) ? Str(b[1]) : "key";
    if (by != "key" && by != "value") Fail("dictsort: 'by' must be 'key' or 'value'");
    std::vector<Value> out;
    for (const auto& [k, val] : v.dict().entries())
      out.push_back(Value::MakeList({Value(k), val}, true));
    size_t pos = by == "key" ? 0 : 1;
    std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
      return PyLess(SortKey(x.list().items[pos], cs), SortKey(y.list().items[pos], cs));
    });
    if (b.has(2) && b[2].Truthy()) std::reverse(out.begin(), out.end());
    return Value::MakeList(std::move(out));
  }
  if (name == "list") {
    no_args();
    return Value::MakeList(Iterate(v));
  }
  if (name == "first" || name == "last") {
    no_args();
    std::vector<Value> items = Iterate(v);
    if (items.empty()) return Undefined{fmt::format("No {} item, sequence was empty.", name)};
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    no_args();
    if (v.IsString()) {
      auto cps = DecodeUtf8(v.str());
      std::reverse(cps.begin(), cps.end());
      return EncodeUtf8(cps, 0, cps.size());
    }
    std::vector<Value> items = Iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::MakeList(std::move(items));
  }
  if (name == "sort") {
    Bound b = Bind("sort", args, {"reverse", "case_sensitive", "attribute"});
    bool cs = b.has(1) && b[1].Truthy();
    std::vector<Value> items = Iterate(v);
    auto key = [&](const Value& x) {
      return SortKey(b.has(2) && !b[2].IsNone() ? GetPath(x, b[2]) : x, cs);
    };
    bool rev = b.has(0) && b[0].Truthy();
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return rev ? PyLess(key(y), key(x)) : PyLess(key(x), key(y));
    });
    return Value::MakeList(std::move(items));
  }
  if (name == "unique") {
    Bound b = Bind("unique", args, {"case_sensitive", "attribute"});
    bool cs = b.has(0) && b[0].Truthy();
    std::vector<Value> out, seen;
    for (const Value& item : Iterate(v)) {
      Value k = SortKey(b.has(1) && !b[1].IsNone() ? GetPath(item, b[1]) : item, cs);
      if (!IsHashable(k)) Fail("unhashable type: '{}'", k.TypeName());
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return PyEquals(s, k); }))
        continue;
      seen.push_back(k);
      out.push_back(item);
    }
    return Value::MakeList(std::move(out));
  }
  if (name == "min" || name == "max") return MinMax(v, args, name == "max");
  if (name == "sum") {
    Bound b = Bind("sum", args, {"attribute", "start"});
    Value total = b.Or(1, Value(int64_t{0}));
    for (const Value& item : Iterate(v)) {
      total = BinaryOp("+", total, b.has(0) && !b[0].IsNone() ? GetPath(item, b[0]) : item);
    }
    return total;
  }
  if (name == "map") {
    std::vector<Value> out;
    std::vector<Value> items =
        v.Truthy() ? Iterate(v) : std::vector<Value>();  // Jinja: `if value:`
    const Value* attribute = nullptr;
    const Value* def = nullptr;
    for (const auto& [k, val] : args.keyword) {
      if (k == "attribute") attribute = &val;
      if (k == "default") def = &val;
    }
    if (attribute) {
      for (const Value& item : items) {
        Value x = GetPath(item, *attribute);
        out.push_back(x.IsUndefined() && def ? *def : x);
      }
      return Value::MakeList(std::move(out));
    }
    if (args.positional.empty() || !args.positional[0].IsString())
      Fail("map: expected a filter name or attribute=");
    std::string filter = args.positional[0].str();
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const Value& item : items) {
      CallArgs a = rest;
      out.push_back(ApplyFilter(in, filter, item, a));
    }
    return Value::MakeList(std::move(out));
  }
  if (name == "select" || name == "reject")
    return Value::MakeList(SelectOrReject(in, v, args, name == "select", false));
  if (name == "selectattr" || name == "rejectattr") {
    return Value::MakeList(SelectOrReject(in, v, args, name == "selectattr", true));
  }
  if (name == "replace") {
    Bound b = Bind("replace", args, {"old", "new", "count"});
    if (!b.has(0) || !b.has(1)) Fail("replace: needs 'old' and 'new' arguments");
    int64_t count = b.has(2) && !b[2].IsNone() ? ToInt(b[2], "replace count") : -1;
    std::string old_s = Str(b[0]), new_s = Str(b[1]), s = text();
    // Bound the result before building it: every match may grow the string.
    if (new_s.size() > old_s.size() && !s.empty()) {
      size_t matches = old_s.empty() ? PyLen(s) + 1 : 0;
      for (size_t p = old_s.empty() ? std::string::npos : s.find(old_s); p != std::string::npos;
           p = s.find(old_s, p + old_s.size()))
        ++matches;
      if (s.size() + matches * (new_s.size() - old_s.size()) > in.limits().max_string_bytes) {
        Fail("replace: result exceeds the string size limit");
      }
    }
    return PyReplace(s, old_s, new_s, count);
  }
  if (name == "int") {
    Bound b = Bind("int", args, {"default", "base"});
    Value def = b.Or(0, Value(int64_t{0}));
    int64_t base = b.has(1) ? ToInt(b[1], "int base") : 10;
    if (v.IsUndefined()) FailUndefined(v);
    if (v.IsInt()) return v;
    if (v.IsBool()) return int64_t{v.AsBool()};
    if (v.IsFloat()) {
      double d = v.AsFloat();
      if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return def;
      return static_cast<int64_t>(std::trunc(d));
    }
    if (v.IsString()) {
      int64_t i;
      if (ParsePyInt(v.str(), base, &i)) return i;
      double d;
      if (ParsePyFloat(v.str(), &d) && std::isfinite(d) && std::fabs(d) < 9.2e18)
        return static_cast<int64_t>(std::trunc(d));
    }
    return def;
  }
  if (name == "float") {
    Bound b = Bind("float", args, {"default"});
    Value def = b.Or(0, Value(0.0));
    if (v.IsUndefined()) FailUndefined(v);
    if (v.IsNumber()) return v.ToDouble();
    double d;
    if (v.IsString() && ParsePyFloat(v.str(), &d)) return d;
    return def;
  }
  if (name == "abs") {
    no_args();
    if (v.IsFloat()) return std::fabs(v.AsFloat());
    if (v.IsInt() || v.IsBool()) {
      int64_t i = v.IsBool() ? v.AsBool() : v.AsInt();
      if (i == INT64_MIN) Fail("integer overflow in abs");
      return i < 0 ? -i : i;
    }
    Fail("bad operand type for abs(): '{}'", v.TypeName());
  }
  if (name == "round") {
    Bound b = Bind("round", args, {"precision", "method"});
    int64_t precision = b.has(0) ? ToInt(b[0], "round precision") : 0;
    std::string method = b.has(1) ? Str(b[1]) : "common";
    if (!v.IsNumber()) Fail("round: expected a number, got {}", v.TypeName());
    if (method == "common") {
      if (!v.IsFloat())
        return v.IsBool() ? Value(int64_t{v.AsBool()}) : v;  // round(int, n) is an int
      return RoundCommon(v.AsFloat(), precision);
    }
    if (method != "ceil" && method != "floor") Fail("round: method must be common, ceil or floor");
    double scale = std::pow(10.0, static_cast<double>(precision));
    double x = v.ToDouble() * scale;
    return (method == "ceil" ? std::ceil(x) : std::floor(x)) / scale;
  }
  if (name == "attr") {
    Bound b = Bind("attr", args, {"name"});
    if (!b[0].IsString()) Fail("attr: the attribute name must be a string");
    if (v.IsMapping()) {
      const std::string& n = b[0].str();
      if (n == "items" || n == "keys" || n == "values" || n == "get") return GetAttr(v, n);
      return Undefined{fmt::format("'dict object' has no attribute '{}'", n)};
    }
    return GetAttr(v, b[0].str());
  }
  if (name == "batch") {
    Bound b = Bind("batch", args, {"linecount", "fill_with"});
    int64_t n = ToInt(b[0], "batch linecount");
    if (n <= 0) Fail("batch: linecount must be positive");
    std::vector<Value> out, cur;
    for (const Value& item : Iterate(v)) {
      cur.push_back(item);
      if (static_cast<int64_t>(cur.size()) == n) {
        out.push_back(Value::MakeList(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      if (b.has(1) && !b[1].IsNone()) {
        while (static_cast<int64_t>(cur.size()) < n) cur.push_back(b[1]);
      }
      out.push_back(Value::MakeList(std::move(cur)));
    }
    return Value::MakeList(std::move(out));
  }
  if (name == "center") {
    Bound b = Bind("center", args, {"width"});
    CallArgs a;
    a.positional.push_back(b.Or(0, Value(int64_t{80})));
    return in.Call(GetAttr(Value(text()), "center"), a);
  }
  if (name == "indent") {
    Bound b = Bind("indent", args, {"width", "first", "blank"});
    return Indent(text(), b.Or(0, Value(int64_t{4})), b.has(1) && b[1].Truthy(),
                  b.has(2) && b[2].Truthy());
  }
  if (name == "wordcount") {
    no_args();
    int64_t words = 0;
    bool in_word = false;
    for (char32_t c : DecodeUtf8(text())) {
      bool w = PyIsAlpha(c) || (c >= '0' && c <= '9') || c == '_';
      if (w && !in_word) ++words;
      in_word = w;
    }
    return words;
  }
  if (name == "truncate") return Truncate(text(), args);
  if (name == "format") {
    if (!args.positional.empty() && !args.keyword.empty())
      Fail("format: can't handle positional and keyword arguments at the same time");
    if (!args.keyword.empty()) {
      Value d = Value::MakeDict();
      for (const auto& [k, val] : args.keyword) d.dict().Set(k, val);
      return PyPercentFormat(text(), d);
    }
    return PyPercentFormat(text(), Value::MakeList(args.positional, true));
  }
  Fail("no filter named '{}' (supported: {})", name,
       fmt::join(std::vector<std::string>(FilterNames().begin(), FilterNames().end()), ", "));
}

bool ApplyTest(Interpreter& in, const std::string& name, const Value& v, CallArgs& args) {
  auto arg0 = [&]() -> Value {
    if (args.positional.size() + args.keyword.size() != 1)
      Fail("test '{}' takes one argument", name);
    return args.positional.empty() ? args.keyword[0].second : args.positional[0];
  };
  if (name == "defined") return !v.IsUndefined();
  if (name == "undefined") return v.IsUndefined();
  if (name == "none") return v.IsNone();
  if (name == "boolean") return v.IsBool();
  if (name == "true") return v.IsBool() && v.AsBool();
  if (name == "false") return v.IsBool() && !v.AsBool();
  if (name == "integer") return v.IsInt();
  if (name == "float") return v.IsFloat();
  if (name == "number") return v.IsNumber();
  if (name == "string") return v.IsString();
  if (name == "mapping") return v.IsMapping();
  if (name == "sequence") return v.IsString() || v.IsList() || v.IsMapping() || v.IsUndefined();
  if (name == "iterable") return v.IsString() || v.IsList() || v.IsMapping() || v.IsUndefined();
  if (name == "callable") return v.IsFunction();
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    CallArgs none;
    return in.Call(GetAttr(Value(Str(v)), name == "lower" ? "islower" : "isupper"), none).Truthy();
  }
  if (name == "odd" || name == "even") {
    return PyEquals(BinaryOp("%", v, Value(int64_t{2})), Value(int64_t{name == "odd" ? 1 : 0}));
  }
  if (name == "divisibleby") {
    Value d = arg0();
    return PyEquals(BinaryOp("%", v, d), Value(int64_t{0}));
  }
  if (name == "eq" || name == "equalto" || name == "==") return PyEquals(v, arg0());
  if (name == "ne" || name == "!=") return !PyEquals(v, arg0());
  if (name == "lt" || name == "lessthan" || name == "<") return PyLess(v, arg0());
  if (name == "gt" || name == "greaterthan" || name == ">") return PyLess(arg0(), v);
  if (name == "le" || name == "<=") return !PyLess(arg0(), v);
  if (name == "ge" || name == ">=") return !PyLess(v, arg0());
  if (name == "in") return Contains(arg0(), v);
  if (name == "sameas") {
    Value o = arg0();
    if (v.IsList() && o.IsList()) return v.list_ptr() == o.list_ptr();
    if (v.IsDict() && o.IsDict()) return v.dict_ptr() == o.dict_ptr();
    if (v.IsNone() || v.IsBool() || o.IsNone() || o.IsBool()) {
      return v.variant().index() == o.variant().index() && PyEquals(v, o);
    }
    return v.variant().index() == o.variant().index() && PyEquals(v, o);
  }
  if (name == "filter") return v.IsString() && FilterNames().count(v.str()) > 0;
  if (name == "test") return v.IsString() && TestNames().count(v.str()) > 0;
  Fail("no test named '{}'", name);
}

}  // namespace crossword::chat::jinja
