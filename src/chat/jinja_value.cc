// Jinja2 runtime values: Python printing (str/repr/float repr), json.dumps, equality, ordering,
// truthiness and the UTF-8 <-> code point helpers that give strings Python's str semantics.
#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "base/utf8.h"

namespace crossword::chat::jinja {

DictObj::DictObj(Kind kind) : kind_(kind) {}

size_t DictObj::size() const { return entries_.size(); }

void DictObj::Clear() {
  entries_.clear();
  index_.clear();
}

const Value* DictObj::Find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void DictObj::Set(std::string key, Value value) {
  int depth = value.Depth() + 1;
  if (depth > kMaxValueNesting) {
    Fail("template value nests deeper than {} levels; flatten the data", kMaxValueNesting);
  }
  depth_ = std::max(depth_, depth);
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
}

void DictObj::SetAt(size_t i, Value value) { entries_[i].second = std::move(value); }

Value Value::MakeList(std::vector<Value> items, bool is_tuple) {
  auto list = std::make_shared<ListObj>();
  list->items = std::move(items);
  list->is_tuple = is_tuple;
  for (const Value& item : list->items) list->depth = std::max(list->depth, item.Depth() + 1);
  if (list->depth > kMaxValueNesting) {
    Fail("template value nests deeper than {} levels; flatten the data", kMaxValueNesting);
  }
  return Value(std::move(list));
}

Value Value::MakeDict(DictObj::Kind kind) { return Value(std::make_shared<DictObj>(kind)); }

int Value::Depth() const {
  if (IsList()) return list().depth;
  if (IsDict()) return dict().depth();
  return 0;
}

double Value::ToDouble() const {
  if (IsInt()) return static_cast<double>(AsInt());
  if (IsBool()) return AsBool() ? 1.0 : 0.0;
  return AsFloat();
}

bool Value::Truthy() const {
  return std::visit(
      [](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Undefined> || std::is_same_v<T, None>) {
          return false;
        } else if constexpr (std::is_same_v<T, bool>) {
          return x;
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return x != 0;
        } else if constexpr (std::is_same_v<T, double>) {
          return x != 0.0;
        } else if constexpr (std::is_same_v<T, std::string>) {
          return !x.empty();
        } else if constexpr (std::is_same_v<T, ListPtr>) {
          return !x->items.empty();
        } else if constexpr (std::is_same_v<T, DictPtr>) {
          return x->kind() != DictObj::Kind::kDict || x->size() != 0;
        } else {
          return true;
        }
      },
      v_);
}

std::string Value::TypeName() const {
  switch (v_.index()) {
    case 0:
      return "Undefined";
    case 1:
      return "NoneType";
    case 2:
      return "bool";
    case 3:
      return "int";
    case 4:
      return "float";
    case 5:
      return "str";
    case 6:
      return list().is_tuple ? "tuple" : "list";
    case 7:
      switch (dict().kind()) {
        case DictObj::Kind::kDict:
          return "dict";
        case DictObj::Kind::kNamespace:
          return "Namespace";
        case DictObj::Kind::kLoop:
          return "LoopContext";
      }
      return "dict";
    default:
      return "function";
  }
}

// ---------------------------------------------------------------------------------------------
// Unicode helpers.

void AppendUtf8(std::string& out, char32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // surrogateescape: a raw invalid byte
    out.push_back(static_cast<char>(cp - 0xDC00));
  } else {
    crossword::AppendUtf8(cp, out);
  }
}

std::vector<char32_t> DecodeUtf8(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp = 0;
    const int len = DecodeUtf8At(s, i, cp);
    if (len == 0) {
      // Each invalid byte becomes a lone low surrogate, as Python's surrogateescape does.
      out.push_back(0xDC00 + static_cast<unsigned char>(s[i]));
      ++i;
    } else {
      out.push_back(cp);
      i += len;
    }
  }
  return out;
}

std::string EncodeUtf8(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  out.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) AppendUtf8(out, cps[i]);
  return out;
}

bool IsPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

size_t PyLen(std::string_view s) {
  bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return (c & 0x80) == 0; });
  return ascii ? s.size() : DecodeUtf8(s).size();
}

// ---------------------------------------------------------------------------------------------
// Printing.

std::string PyFloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e-05", "2e+00"
  std::string out;
  size_t pos = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    pos = 1;
  }
  size_t epos = sci.find('e');
  std::string digits;
  for (size_t i = pos; i < epos; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  int exp = std::stoi(sci.substr(epos + 1));
  // CPython's repr switches to exponent notation when the decimal point would sit more than
  // 16 digits right or 4 zeros left of the first digit.
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string int_part = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
      while (int_part.size() < static_cast<size_t>(exp + 1)) int_part.push_back('0');
      std::string frac =
          digits.size() > static_cast<size_t>(exp + 1) ? digits.substr(exp + 1) : "0";
      out += int_part + "." + frac;
    } else {
      out += "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out.push_back(digits[0]);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += ebuf;
  }
  return out;
}

namespace {

// An approximation of "not str.isprintable()" for code points above ASCII: controls, format
// characters, separators other than the ASCII space, surrogates and private use.
bool IsNonPrintable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return true;
  if (c < 0x80) return false;
  if (c <= 0xA0 || c == 0xAD) return true;
  if (c == 0x61C || c == 0x180E || c == 0x1680 || (c >= 0x600 && c <= 0x605) || c == 0x6DD ||
      c == 0x70F || c == 0x8E2)
    return true;
  if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0x3000)
    return true;
  if ((c >= 0xD800 && c <= 0xF8FF) || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB)) return true;
  if (c >= 0xE0000) return true;
  return false;
}

void AppendPyStringRepr(std::string& out, const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  out.push_back(quote);
  for (char32_t c : DecodeUtf8(s)) {
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c >= 0xDC80 && c <= 0xDCFF) {
      std::snprintf(buf, sizeof(buf), "\\udc%02x", static_cast<unsigned>(c & 0xFF));
      out += buf;
    } else if (IsNonPrintable(c)) {
      if (c <= 0xFF) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      } else if (c <= 0xFFFF) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      AppendUtf8(out, c);
    }
  }
  out.push_back(quote);
}

void AppendRepr(std::string& out, const Value& v, int depth, bool top_level_str);

void AppendContainerRepr(std::string& out, const Value& v, int depth) {
  if (v.IsList()) {
    const ListObj& l = v.list();
    out.push_back(l.is_tuple ? '(' : '[');
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (i) out += ", ";
      AppendRepr(out, l.items[i], depth - 1, false);
    }
    if (l.is_tuple && l.items.size() == 1) out.push_back(',');
    out.push_back(l.is_tuple ? ')' : ']');
    return;
  }
  const DictObj& d = v.dict();
  if (d.kind() == DictObj::Kind::kLoop) {
    out += "<LoopContext>";
    return;
  }
  if (d.kind() == DictObj::Kind::kNamespace) out += "<Namespace ";
  out.push_back('{');
  bool first = true;
  for (const auto& [k, val] : d.entries()) {
    if (!first) out += ", ";
    first = false;
    AppendPyStringRepr(out, k);
    out += ": ";
    AppendRepr(out, val, depth - 1, false);
  }
  out.push_back('}');
  if (d.kind() == DictObj::Kind::kNamespace) out.push_back('>');
}

void AppendRepr(std::string& out, const Value& v, int depth, bool top_level_str) {
  if (depth <= 0) Fail("template value is nested too deeply to print (limit reached)");
  switch (v.variant().index()) {
    case 0:
      out += top_level_str ? "" : "Undefined";
      return;
    case 1:
      out += "None";
      return;
    case 2:
      out += v.AsBool() ? "True" : "False";
      return;
    case 3:
      out += std::to_string(v.AsInt());
      return;
    case 4:
      out += PyFloatRepr(v.AsFloat());
      return;
    case 5:
      if (top_level_str) {
        out += v.str();
      } else {
        AppendPyStringRepr(out, v.str());
      }
      return;
    case 6:
    case 7:
      AppendContainerRepr(out, v, depth);
      return;
    default:
      out += "<function " + v.function().name + ">";
      return;
  }
}

void AppendJsonString(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  auto hex4 = [&out](unsigned u) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "\\u%04x", u);
    out += buf;
  };
  auto escape_ascii = [&](unsigned char c) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
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
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
          hex4(c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  };
  if (!ensure_ascii) {
    for (char c : s) {
      auto u = static_cast<unsigned char>(c);
      if (u < 0x80) {
        escape_ascii(u);
      } else {
        out.push_back(c);
      }
    }
  } else {
    for (char32_t c : DecodeUtf8(s)) {
      if (c < 0x80) {
        escape_ascii(static_cast<unsigned char>(c));
      } else if (c < 0x10000) {
        hex4(c);
      } else {
        char32_t v = c - 0x10000;
        hex4(0xD800 + (v >> 10));
        hex4(0xDC00 + (v & 0x3FF));
      }
    }
  }
  out.push_back('"');
}

void AppendJson(std::string& out, const Value& v, const JsonDumpOptions& o, int level, int depth) {
  if (depth <= 0) Fail("tojson: value is nested too deeply (limit reached)");
  auto newline = [&](int lvl) {
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += o.indent_string;
  };
  switch (v.variant().index()) {
    case 0:
      Fail("tojson: Object of type Undefined is not JSON serializable");
    case 1:
      out += "null";
      return;
    case 2:
      out += v.AsBool() ? "true" : "false";
      return;
    case 3:
      out += std::to_string(v.AsInt());
      return;
    case 4: {
      double d = v.AsFloat();
      if (std::isnan(d)) {
        out += "NaN";
      } else if (std::isinf(d)) {
        out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        out += PyFloatRepr(d);
      }
      return;
    }
    case 5:
      AppendJsonString(out, v.str(), o.ensure_ascii);
      return;
    case 6: {
      const auto& items = v.list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        if (o.has_indent) newline(level + 1);
        AppendJson(out, items[i], o, level + 1, depth - 1);
      }
      if (o.has_indent) newline(level);
      out.push_back(']');
      return;
    }
    case 7: {
      const DictObj& d = v.dict();
      if (d.kind() != DictObj::Kind::kDict) {
        Fail("tojson: Object of type {} is not JSON serializable", v.TypeName());
      }
      if (d.size() == 0) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : d.entries()) entries.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += o.item_separator;
        if (o.has_indent) newline(level + 1);
        AppendJsonString(out, entries[i]->first, o.ensure_ascii);
        out += o.key_separator;
        AppendJson(out, entries[i]->second, o, level + 1, depth - 1);
      }
      if (o.has_indent) newline(level);
      out.push_back('}');
      return;
    }
    default:
      Fail("tojson: Object of type function is not JSON serializable");
  }
}

}  // namespace

std::string ToPyStr(const Value& value, int max_depth) {
  std::string out;
  AppendRepr(out, value, max_depth, true);
  return out;
}

std::string ToPyRepr(const Value& value, int max_depth) {
  std::string out;
  AppendRepr(out, value, max_depth, false);
  return out;
}

std::string PyJsonDumps(const Value& value, const JsonDumpOptions& options, int max_depth) {
  std::string out;
  AppendJson(out, value, options, 0, max_depth);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Comparison.

bool PyEquals(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) {
    if ((a.IsInt() || a.IsBool()) && (b.IsInt() || b.IsBool())) {
      int64_t x = a.IsBool() ? a.AsBool() : a.AsInt();
      int64_t y = b.IsBool() ? b.AsBool() : b.AsInt();
      return x == y;
    }
    return a.ToDouble() == b.ToDouble();
  }
  if (a.variant().index() != b.variant().index()) return false;
  switch (a.variant().index()) {
    case 0:
    case 1:
      return true;
    case 5:
      return a.str() == b.str();
    case 6: {
      const ListObj& x = a.list();
      const ListObj& y = b.list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!PyEquals(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case 7: {
      const DictObj& x = a.dict();
      const DictObj& y = b.dict();
      if (x.kind() != DictObj::Kind::kDict || y.kind() != DictObj::Kind::kDict) {
        return &x == &y;
      }
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries()) {
        const Value* other = y.Find(k);
        if (!other || !PyEquals(v, *other)) return false;
      }
      return true;
    }
    case 8:
      return &a.function() == &b.function();
    default:
      return false;
  }
}

bool PyLess(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) {
    if ((a.IsInt() || a.IsBool()) && (b.IsInt() || b.IsBool())) {
      int64_t x = a.IsBool() ? a.AsBool() : a.AsInt();
      int64_t y = b.IsBool() ? b.AsBool() : b.AsInt();
      return x < y;
    }
    return a.ToDouble() < b.ToDouble();
  }
  if (a.IsString() && b.IsString()) return a.str() < b.str();
  if (a.IsList() && b.IsList() && a.list().is_tuple == b.list().is_tuple) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!PyEquals(x[i], y[i])) return PyLess(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  Fail("'<' not supported between instances of '{}' and '{}'", a.TypeName(), b.TypeName());
}

namespace {

Value FromJsonAt(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueNesting) {
    Fail("chat template context nests deeper than {} levels", kMaxValueNesting);
  }
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None{};
    case nlohmann::ordered_json::value_t::boolean:
      return j.get<bool>();
    case nlohmann::ordered_json::value_t::number_integer:
      return j.get<int64_t>();
    case nlohmann::ordered_json::value_t::number_unsigned: {
      auto u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(u);
      return static_cast<double>(u);
    }
    case nlohmann::ordered_json::value_t::number_float:
      return j.get<double>();
    case nlohmann::ordered_json::value_t::string:
      return j.get<std::string>();
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJsonAt(e, depth + 1));
      return Value::MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::MakeDict();
      for (const auto& [k, e] : j.items()) d.dict().Set(k, FromJsonAt(e, depth + 1));
      return d;
    }
    default:
      Fail("chat template context: unsupported JSON value of type {}", j.type_name());
  }
}

}  // namespace

Value FromJson(const nlohmann::ordered_json& j) { return FromJsonAt(j, 1); }

}  // namespace crossword::chat::jinja
