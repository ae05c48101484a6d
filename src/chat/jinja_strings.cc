// Python str semantics for the Jinja2 interpreter: strip/split/replace/splitlines, case mapping,
// %-formatting, str.format and the string bound methods templates call ('a'.startswith(...)).
#include "chat/jinja_strings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "chat/jinja_interp.h"

namespace crossword::chat::jinja {
namespace {

// Simple one-to-one case pairs. Returns c when there is no mapping.
char32_t UpperOf(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 0x20;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c >= 0x100 && c <= 0x17F) {
    bool odd_lower = (c <= 0x137) || (c >= 0x14A && c <= 0x177);
    bool even_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_lower && (c & 1)) return c - 1;
    if (even_lower && !(c & 1)) return c - 1;
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    return c;
  }
  if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 0x20;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 0x25;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 0x3F;
  if (c >= 0x430 && c <= 0x44F) return c - 0x20;
  if (c >= 0x450 && c <= 0x45F) return c - 0x50;
  if (((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF)) && (c & 1)) return c - 1;
  return c;
}

char32_t LowerOf(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    bool even_upper = (c <= 0x137) || (c >= 0x14A && c <= 0x177);
    bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (even_upper && !(c & 1) && c != 0x130) return c + 1;
    if (odd_upper && (c & 1)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 0x25;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 0x3F;
  if (c >= 0x410 && c <= 0x42F) return c + 0x20;
  if (c >= 0x400 && c <= 0x40F) return c + 0x50;
  if (((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF)) && !(c & 1)) return c + 1;
  return c;
}

void AppendUpper(std::string& out, char32_t c) {
  if (c == 0xDF) {  // German sharp s upper-cases to two letters
    out += "SS";
    return;
  }
  AppendUtf8(out, UpperOf(c));
}

bool IsCased(char32_t c) { return c == 0xDF || UpperOf(c) != c || LowerOf(c) != c; }

std::string ValueToCodepointString(const Value& v) {
  if (!v.IsString()) Fail("expected a string argument, got {}", v.TypeName());
  return v.str();
}

int64_t IntArg(const Value& v, const char* what) {
  if (v.IsInt()) return v.AsInt();
  if (v.IsBool()) return v.AsBool();
  Fail("{} must be an integer, got {}", what, v.TypeName());
}

}  // namespace

bool PyIsAlpha(char32_t c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  if (c < 0xAA) return false;
  return IsCased(c) || (c >= 0x3040 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7A3) ||
         (c >= 0x5D0 && c <= 0x6FF) || (c >= 0x900 && c <= 0xDFF);
}

std::string PyUpper(std::string_view s) {
  std::string out;
  for (char32_t c : DecodeUtf8(s)) AppendUpper(out, c);
  return out;
}

std::string PyLower(std::string_view s) {
  std::string out;
  for (char32_t c : DecodeUtf8(s)) AppendUtf8(out, LowerOf(c));
  return out;
}

std::string PyCapitalize(std::string_view s) {
  auto cps = DecodeUtf8(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0) {
      AppendUpper(out, cps[i]);
    } else {
      AppendUtf8(out, LowerOf(cps[i]));
    }
  }
  return out;
}

std::string PyTitle(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : DecodeUtf8(s)) {
    if (prev_cased) {
      AppendUtf8(out, LowerOf(c));
    } else {
      AppendUpper(out, c);
    }
    prev_cased = IsCased(c);
  }
  return out;
}

namespace {

// Decodes the code point starting at byte i (invalid bytes decode as themselves, one byte long).
char32_t CodepointAt(std::string_view s, size_t i, size_t* len) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    *len = 1;
    return b;
  }
  size_t n = (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
  if (i + n > s.size()) n = 1;
  auto cps = DecodeUtf8(s.substr(i, n));
  std::string enc;
  AppendUtf8(enc, cps[0]);
  *len = enc.size();
  return cps[0];
}

}  // namespace

std::string PyStrip(std::string_view s, const Value& chars, bool left, bool right) {
  // Works on the two ends only (no full decode): strip runs on every message in chat templates.
  std::vector<char32_t> set;
  bool whitespace = chars.IsNone() || chars.IsUndefined();
  if (!whitespace) set = DecodeUtf8(ValueToCodepointString(chars));
  auto strip_it = [&](char32_t c) {
    return whitespace ? IsPySpace(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t len;
      char32_t c = CodepointAt(s, b, &len);
      if (!strip_it(c)) break;
      b += len;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      // Back up to the lead byte of the last code point (at most 3 continuation bytes).
      while (start > b && e - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) {
        --start;
      }
      size_t len;
      char32_t c = CodepointAt(s, start, &len);
      if (start + len != e) {  // not a whole code point: an invalid byte, decoded alone
        start = e - 1;
        c = CodepointAt(s, start, &len);
      }
      if (!strip_it(c)) break;
      e = start;
    }
  }
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> PySplit(std::string_view s, const Value& sep, int64_t maxsplit,
                                 bool from_right) {
  std::vector<std::string> parts;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep.IsNone() || sep.IsUndefined()) {
    auto cps = DecodeUtf8(s);
    if (!from_right) {
      size_t i = 0, n = cps.size();
      while (true) {
        while (i < n && IsPySpace(cps[i])) ++i;
        if (i >= n) break;
        if (static_cast<int64_t>(parts.size()) == maxsplit) {
          parts.push_back(EncodeUtf8(cps, i, n));  // the rest, trailing whitespace included
          break;
        }
        size_t j = i;
        while (j < n && !IsPySpace(cps[j])) ++j;
        parts.push_back(EncodeUtf8(cps, i, j));
        i = j;
      }
    } else {
      size_t e = cps.size();
      while (true) {
        while (e > 0 && IsPySpace(cps[e - 1])) --e;
        if (e == 0) break;
        if (static_cast<int64_t>(parts.size()) == maxsplit) {
          parts.push_back(EncodeUtf8(cps, 0, e));
          break;
        }
        size_t b = e;
        while (b > 0 && !IsPySpace(cps[b - 1])) --b;
        parts.push_back(EncodeUtf8(cps, b, e));
        e = b;
      }
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  std::string sp = ValueToCodepointString(sep);
  if (sp.empty()) Fail("split: empty separator");
  if (!from_right) {
    size_t start = 0;
    int64_t splits = 0;
    while (splits < maxsplit) {
      size_t pos = s.find(sp, start);
      if (pos == std::string_view::npos) break;
      parts.emplace_back(s.substr(start, pos - start));
      start = pos + sp.size();
      ++splits;
    }
    parts.emplace_back(s.substr(start));
  } else {
    size_t end = s.size();
    int64_t splits = 0;
    while (splits < maxsplit && end >= sp.size()) {
      size_t pos = s.rfind(sp, end - sp.size());
      if (pos == std::string_view::npos) break;
      parts.emplace_back(s.substr(pos + sp.size(), end - pos - sp.size()));
      end = pos;
      ++splits;
    }
    parts.emplace_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::vector<std::string> PySplitLines(std::string_view s, bool keepends) {
  auto cps = DecodeUtf8(s);
  std::vector<std::string> lines;
  size_t start = 0, i = 0;
  while (i < cps.size()) {
    char32_t c = cps[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    size_t eol = i + 1;
    if (c == '\r' && eol < cps.size() && cps[eol] == '\n') ++eol;
    lines.push_back(EncodeUtf8(cps, start, keepends ? eol : i));
    start = i = eol;
  }
  if (start < cps.size()) lines.push_back(EncodeUtf8(cps, start, cps.size()));
  return lines;
}

std::string PyReplace(std::string_view s, std::string_view old, std::string_view repl,
                      int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old.empty()) {
    auto cps = DecodeUtf8(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (done < count) {
        out += repl;
        ++done;
      }
      if (i < cps.size()) AppendUtf8(out, cps[i]);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (done < count) {
    size_t pos = s.find(old, start);
    if (pos == std::string_view::npos) break;
    out += s.substr(start, pos - start);
    out += repl;
    start = pos + old.size();
    ++done;
  }
  out += s.substr(start);
  return out;
}

void PySliceIndices(int64_t len, const Value& start_v, const Value& stop_v, const Value& step_v,
                    int64_t* out_start, int64_t* out_stop, int64_t* out_step) {
  auto get = [](const Value& v, bool* is_none) -> int64_t {
    *is_none = v.IsNone() || v.IsUndefined();
    if (*is_none) return 0;
    if (v.IsInt()) return v.AsInt();
    if (v.IsBool()) return v.AsBool();
    Fail("slice indices must be integers or None, got {}", v.TypeName());
  };
  bool none_start, none_stop, none_step;
  int64_t start = get(start_v, &none_start);
  int64_t stop = get(stop_v, &none_stop);
  int64_t step = get(step_v, &none_step);
  if (none_step) step = 1;
  if (step == 0) Fail("slice step cannot be zero");
  auto clamp = [&](int64_t v, bool none, bool is_start) {
    if (none) return is_start ? (step < 0 ? len - 1 : 0) : (step < 0 ? -1 : len);
    if (v < 0) {
      v += len;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= len) {
      v = step < 0 ? len - 1 : len;
    }
    return v;
  };
  *out_start = clamp(start, none_start, true);
  *out_stop = clamp(stop, none_stop, false);
  *out_step = step;
}

// ---------------------------------------------------------------------------------------------
// Bound string methods.

Value GetStringMethod(const std::string& s, const std::string& name) {
  using Fn = std::function<Value(const std::string&, CallArgs&)>;
  auto method = [&](Fn body) {
    auto f = std::make_shared<FunctionObj>();
    f->name = "str." + name;
    f->fn = [self = s, body = std::move(body)](Interpreter&, CallArgs& a) { return body(self, a); };
    return Value(f);
  };
  auto arg = [](CallArgs& a, size_t i, const char* kw) -> Value {
    if (i < a.positional.size()) return a.positional[i];
    for (auto& [k, v] : a.keyword) {
      if (k == kw) return v;
    }
    return None{};
  };
  auto substr_of = [](const std::string& self, const Value& start, const Value& end) {
    if ((start.IsNone()) && (end.IsNone())) return self;
    auto cps = DecodeUtf8(self);
    int64_t b, e, st;
    PySliceIndices(static_cast<int64_t>(cps.size()), start, end, None{}, &b, &e, &st);
    return b < e ? EncodeUtf8(cps, b, e) : std::string();
  };
  if (name == "startswith" || name == "endswith") {
    bool starts = name == "startswith";
    return method([starts, arg, substr_of](const std::string& self, CallArgs& a) -> Value {
      std::string text = substr_of(self, arg(a, 1, "start"), arg(a, 2, "end"));
      Value p = arg(a, 0, "prefix");
      std::vector<Value> options = p.IsList() ? p.list().items : std::vector<Value>{p};
      for (const Value& o : options) {
        if (!o.IsString())
          Fail("str.{}: argument must be str or a tuple of str, not {}",
               starts ? "startswith" : "endswith", o.TypeName());
        const std::string& x = o.str();
        bool hit = text.size() >= x.size() &&
                   (starts ? text.compare(0, x.size(), x) == 0
                           : text.compare(text.size() - x.size(), x.size(), x) == 0);
        if (hit) return true;
      }
      return false;
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return method([l, r, arg](const std::string& self, CallArgs& a) -> Value {
      return PyStrip(self, arg(a, 0, "chars"), l, r);
    });
  }
  if (name == "split" || name == "rsplit") {
    bool right = name == "rsplit";
    return method([right, arg](const std::string& self, CallArgs& a) -> Value {
      Value m = arg(a, 1, "maxsplit");
      std::vector<Value> items;
      for (auto& p :
           PySplit(self, arg(a, 0, "sep"), m.IsNone() ? -1 : IntArg(m, "maxsplit"), right))
        items.emplace_back(std::move(p));
      return Value::MakeList(std::move(items));
    });
  }
  if (name == "splitlines") {
    return method([arg](const std::string& self, CallArgs& a) -> Value {
      std::vector<Value> items;
      for (auto& p : PySplitLines(self, arg(a, 0, "keepends").Truthy()))
        items.emplace_back(std::move(p));
      return Value::MakeList(std::move(items));
    });
  }
  if (name == "upper")
    return method([](const std::string& self, CallArgs&) -> Value { return PyUpper(self); });
  if (name == "lower" || name == "casefold")
    return method([](const std::string& self, CallArgs&) -> Value { return PyLower(self); });
  if (name == "title")
    return method([](const std::string& self, CallArgs&) -> Value { return PyTitle(self); });
  if (name == "capitalize")
    return method([](const std::string& self, CallArgs&) -> Value { return PyCapitalize(self); });
  if (name == "replace") {
    return method([arg](const std::string& self, CallArgs& a) -> Value {
      Value c = arg(a, 2, "count");
      return PyReplace(self, ValueToCodepointString(arg(a, 0, "old")),
                       ValueToCodepointString(arg(a, 1, "new")),
                       c.IsNone() ? -1 : IntArg(c, "count"));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    std::string n = name;
    return method([n, arg, substr_of](const std::string& self, CallArgs& a) -> Value {
      std::string sub = ValueToCodepointString(arg(a, 0, "sub"));
      Value start = arg(a, 1, "start");
      std::string text = substr_of(self, start, arg(a, 2, "end"));
      int64_t offset = 0;
      if (!start.IsNone()) {
        int64_t b, e, st;
        PySliceIndices(static_cast<int64_t>(PyLen(self)), start, None{}, None{}, &b, &e, &st);
        offset = b;
      }
      if (n == "count") {
        if (sub.empty()) return static_cast<int64_t>(PyLen(text) + 1);
        int64_t count = 0;
        for (size_t p = text.find(sub); p != std::string::npos; p = text.find(sub, p + sub.size()))
          ++count;
        return count;
      }
      size_t p = (n == "find" || n == "index") ? text.find(sub) : text.rfind(sub);
      if (p == std::string::npos) {
        if (n == "index" || n == "rindex") Fail("str.{}: substring not found", n);
        return int64_t{-1};
      }
      return static_cast<int64_t>(PyLen(std::string_view(text).substr(0, p))) + offset;
    });
  }
  if (name == "join") {
    return method([](const std::string& self, CallArgs& a) -> Value {
      if (a.positional.size() != 1) Fail("str.join takes exactly one argument");
      std::string out;
      size_t i = 0;
      for (const Value& item : Iterate(a.positional[0])) {
        if (!item.IsString())
          Fail("sequence item {}: expected str instance, {} found", i, item.TypeName());
        if (i++) out += self;
        out += item.str();
      }
      return out;
    });
  }
  if (name == "format") {
    return method([](const std::string& self, CallArgs& a) -> Value {
      return PyStrFormat(self, a.positional, a.keyword);
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    bool prefix = name == "removeprefix";
    return method([prefix, arg](const std::string& self, CallArgs& a) -> Value {
      std::string x = ValueToCodepointString(arg(a, 0, prefix ? "prefix" : "suffix"));
      if (prefix && self.compare(0, x.size(), x) == 0) return self.substr(x.size());
      if (!prefix && self.size() >= x.size() &&
          self.compare(self.size() - x.size(), x.size(), x) == 0)
        return self.substr(0, self.size() - x.size());
      return self;
    });
  }
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric" || name == "isalpha" ||
      name == "isalnum" || name == "isspace" || name == "islower" || name == "isupper") {
    std::string n = name;
    return method([n](const std::string& self, CallArgs&) -> Value {
      auto cps = DecodeUtf8(self);
      if (cps.empty()) return false;
      auto digit = [](char32_t c) { return c >= '0' && c <= '9'; };
      if (n == "islower" || n == "isupper") {
        bool any = false;
        for (char32_t c : cps) {
          if (!IsCased(c)) continue;
          any = true;
          if ((n == "islower") != (LowerOf(c) == c && c != 0x130)) return false;
        }
        return any;
      }
      for (char32_t c : cps) {
        bool ok = n == "isspace"   ? IsPySpace(c)
                  : n == "isalpha" ? PyIsAlpha(c)
                  : n == "isalnum" ? (PyIsAlpha(c) || digit(c))
                                   : digit(c);
        if (!ok) return false;
      }
      return true;
    });
  }
  if (name == "zfill" || name == "ljust" || name == "rjust" || name == "center") {
    std::string n = name;
    return method([n, arg](const std::string& self, CallArgs& a) -> Value {
      int64_t width = IntArg(arg(a, 0, "width"), "width");
      if (width > (1 << 20)) Fail("str.{}: width too large", n);
      Value f = arg(a, 1, "fillchar");
      std::string fill = f.IsNone() ? (n == "zfill" ? "0" : " ") : ValueToCodepointString(f);
      int64_t len = static_cast<int64_t>(PyLen(self));
      if (width <= len) return self;
      int64_t pad = width - len;
      auto rep = [&](int64_t k) {
        std::string s;
        for (int64_t q = 0; q < k; ++q) s += fill;
        return s;
      };
      if (n == "ljust") return self + rep(pad);
      if (n == "rjust") return rep(pad) + self;
      if (n == "zfill") {
        if (!self.empty() && (self[0] == '-' || self[0] == '+'))
          return self.substr(0, 1) + rep(pad) + self.substr(1);
        return rep(pad) + self;
      }
      int64_t left = pad / 2 + (pad & width & 1);
      return rep(left) + self + rep(pad - left);
    });
  }
  return Undefined{fmt::format("'str object' has no attribute '{}'", name)};
}

}  // namespace crossword::chat::jinja
