// JSON Schema compiler pieces for values: canonical JSON text, GBNF literals, canonical string
// characters, numbers with bounds, string formats.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>

#include "base/utf8.h"
#include "grammar/gbnf_text.h"
#include "grammar/json_internal.h"
#include "grammar/json_schema.h"

namespace crossword::grammar {
namespace {

void AppendCanonicalString(std::string_view s, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
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
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 15]);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

// Shortest round-trip digits and decimal exponent: x = d1.d2d3... * 10^exp.
void ShortestDigits(double x, std::string& digits, int& exp) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, std::fabs(x), std::chars_format::scientific);
  std::string_view s(buf, static_cast<size_t>(r.ptr - buf));
  const size_t e = s.find('e');
  digits.clear();
  for (char c : s.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  exp = std::stoi(std::string(s.substr(e + 1)));
}

// JavaScript's Number.prototype.toString for finite doubles (ECMA-262 Number::toString),
// except that integral values are written in plain digits at any magnitude.
std::string FormatDouble(double x) {
  if (!std::isfinite(x)) return "null";
  if (x == 0) return "0";
  std::string digits;
  int exp;
  ShortestDigits(x, digits, exp);
  std::string out = x < 0 ? "-" : "";
  const int n = static_cast<int>(digits.size());
  if (exp >= n - 1) {  // integral: plain digits at any magnitude (JavaScript: below 1e21)
    out += digits + std::string(static_cast<size_t>(exp - (n - 1)), '0');
    return out;
  }
  if (exp >= -6 && exp < 21) {
    if (exp >= 0) {
      out += digits.substr(0, static_cast<size_t>(exp + 1)) + "." +
             digits.substr(static_cast<size_t>(exp + 1));
    } else {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  out += exp < 0 ? "e-" : "e+";
  out += std::to_string(std::abs(exp));
  return out;
}

void AppendCanonical(const nlohmann::ordered_json& v, std::string& out) {
  using T = nlohmann::ordered_json::value_t;
  // Iterative: values from untrusted documents may nest deeply.
  struct Frame {
    const nlohmann::ordered_json* v;
    nlohmann::ordered_json::const_iterator it;
    bool first;
  };
  std::vector<Frame> stack;
  auto open = [&](const nlohmann::ordered_json& x) {
    switch (x.type()) {
      case T::object:
        out.push_back('{');
        stack.push_back({&x, x.begin(), true});
        return;
      case T::array:
        out.push_back('[');
        stack.push_back({&x, x.begin(), true});
        return;
      case T::string:
        AppendCanonicalString(x.get_ref<const std::string&>(), out);
        return;
      case T::boolean:
        out += x.get<bool>() ? "true" : "false";
        return;
      case T::number_integer:
        out += std::to_string(x.get<int64_t>());
        return;
      case T::number_unsigned:
        out += std::to_string(x.get<uint64_t>());
        return;
      case T::number_float:
        out += FormatDouble(x.get<double>());
        return;
      default:
        out += "null";
        return;
    }
  };
  open(v);
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.it == f.v->end()) {
      out.push_back(f.v->is_object() ? '}' : ']');
      stack.pop_back();
      continue;
    }
    if (!f.first) out.push_back(',');
    f.first = false;
    const auto it = f.it++;
    if (f.v->is_object()) {
      AppendCanonicalString(it.key(), out);
      out.push_back(':');
    }
    open(*it);  // may invalidate `f`
  }
}

}  // namespace

std::string CanonicalJson(const nlohmann::ordered_json& value) {
  std::string out;
  AppendCanonical(value, out);
  return out;
}

namespace json_internal {

std::string Rules::Reserve(std::string_view hint) {
  std::string base;
  for (char c : hint) {
    const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (word) {
      base.push_back(c);
    } else if (!base.empty() && base.back() != '-') {
      base.push_back('-');
    }
    if (base.size() >= 40) break;
  }
  while (!base.empty() && base.back() == '-') base.pop_back();
  if (base.empty()) base = "r";
  base = prefix_ + base;  // a hint never yields "--", which the shared names use
  std::string name = base;
  int& n = counters_[base];
  while (rules_.count(name) || name == prefix_ + "root") name = base + "-" + std::to_string(++n);
  rules_[name];  // reserved
  return name;
}

void Rules::Define(const std::string& name, std::string body) {
  bytes_ += name.size() + body.size() + 6;
  rules_[name] = std::move(body);
}

std::string Rules::Add(std::string_view hint, std::string body) {
  std::string name = Reserve(hint);
  Define(name, std::move(body));
  return name;
}

std::string Rules::Shared(const std::string& name, const std::string& body) {
  const std::string full = prefix_ + name;
  if (!rules_.count(full)) Define(full, body);
  return full;
}

std::string Rules::Text(const std::string& root_body) const {
  std::string out = prefix_ + "root ::= " + root_body + "\n";
  for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
  return out;
}

std::string GbnfLiteral(std::string_view bytes) {
  std::string out = "\"";
  for (char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out.push_back(ch);
    }
  }
  out.push_back('"');
  return out;
}

std::string GbnfClassChar(char32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return fmt::format("\\x{:02X}", static_cast<uint32_t>(cp));
  if (cp == ']' || cp == '[' || cp == '\\' || cp == '-' || cp == '^' || cp == '"') {
    return std::string("\\") + static_cast<char>(cp);
  }
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  if (cp <= 0xFFFF) return fmt::format("\\u{:04X}", static_cast<uint32_t>(cp));
  return fmt::format("\\U{:08X}", static_cast<uint32_t>(cp));
}

std::string CharRule(Rules& rules, bool raw) {
  if (raw) return rules.Shared("j--rchar", "[^<]");
  return rules.Shared(
      "j--char",
      R"([^"\\\x00-\x1F] | "\\" ( ["\\bfnrt] | "u00" ( "0" [0-7bef] | "1" [0-9a-f] ) ))");
}

std::string CodepointSetGbnf(const std::vector<std::pair<char32_t, char32_t>>& ranges, bool raw) {
  std::vector<std::pair<char32_t, char32_t>> r(ranges.begin(), ranges.end());
  std::sort(r.begin(), r.end());
  std::vector<std::string> alts;
  if (raw) {  // the code points themselves, `<` excepted
    std::string cls;
    for (auto [a, b] : r) {
      b = std::min<char32_t>(b, 0x10FFFF);
      for (auto [lo, hi] : {std::pair<char32_t, char32_t>{a, std::min<char32_t>(b, '<' - 1)},
                            std::pair<char32_t, char32_t>{std::max<char32_t>(a, '<' + 1), b}}) {
        if (lo > hi) continue;
        cls += GbnfClassChar(lo);
        if (hi > lo) cls += "-" + GbnfClassChar(hi);
      }
    }
    return cls.empty() ? std::string(kNothing) : "[" + cls + "]";
  }
  std::string cls;
  auto add_raw = [&](char32_t a, char32_t b) {
    if (a > b) return;
    cls += GbnfClassChar(a);
    if (b > a) cls += "-" + GbnfClassChar(b);
  };
  for (auto [a, b] : r) {
    if (a > b) continue;
    b = std::min<char32_t>(b, 0x10FFFF);
    for (char32_t c = a; c <= std::min<char32_t>(b, 0x1F); ++c) {
      std::string esc;
      AppendCanonicalString(std::string(1, static_cast<char>(c)), esc);
      alts.push_back(GbnfLiteral(esc.substr(1, esc.size() - 2)));
    }
    // Raw part: [max(a, 0x20), b] without '"', '\' and surrogates.
    char32_t lo = std::max<char32_t>(a, 0x20);
    for (char32_t special : {char32_t{'"'}, char32_t{'\\'}}) {
      if (lo <= special && special <= b) {
        add_raw(lo, special - 1);
        alts.push_back(GbnfLiteral(special == '"' ? "\\\"" : "\\\\"));
        lo = special + 1;
      }
    }
    if (lo <= b) {
      if (lo < 0xD800 && b > 0xDFFF) {
        add_raw(lo, 0xD7FF);
        add_raw(0xE000, b);
      } else if (!(lo >= 0xD800 && b <= 0xDFFF)) {
        add_raw(lo < 0xD800 || lo > 0xDFFF ? lo : 0xE000, b < 0xD800 || b > 0xDFFF ? b : 0xD7FF);
      }
    }
  }
  if (!cls.empty()) alts.insert(alts.begin(), "[" + cls + "]");
  if (alts.empty()) return std::string(kNothing);
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

// ---- numbers ----

namespace {

// A decimal number: sign, integer digits without leading zeros ("0" for zero), fraction digits
// without trailing zeros.
struct Dec {
  bool neg = false;
  std::string ip = "0", fp;
  bool IsZero() const { return ip == "0" && fp.empty(); }
};

Dec ToDec(const Json& v, std::string_view name) {
  Dec d;
  if (v.is_number_unsigned()) {
    d.ip = std::to_string(v.get<uint64_t>());
    return d;
  }
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    d.neg = x < 0;
    const uint64_t m = x < 0 ? uint64_t{0} - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
    d.ip = std::to_string(m);
    return d;
  }
  const double x = v.get<double>();
  if (x == 0) return d;
  std::string digits;
  int exp;
  ShortestDigits(x, digits, exp);
  if (exp > 40 || exp < -40) {
    FailGrammar(ErrorKind::kUnsupported,
                "json schema: {} {} is outside the supported range of bounds (1e-40 to 1e40)", name,
                FormatDouble(x));
  }
  d.neg = x < 0;
  const int n = static_cast<int>(digits.size());
  if (exp >= 0) {
    d.ip = exp + 1 >= n ? digits + std::string(static_cast<size_t>(exp + 1 - n), '0')
                        : digits.substr(0, static_cast<size_t>(exp + 1));
    d.fp = exp + 1 >= n ? "" : digits.substr(static_cast<size_t>(exp + 1));
  } else {
    d.ip = "0";
    d.fp = std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  }
  while (!d.fp.empty() && d.fp.back() == '0') d.fp.pop_back();
  return d;
}

int CompareDigits(const std::string& a, const std::string& b) {  // no leading zeros
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b) < 0 ? -1 : a.compare(b) > 0 ? 1 : 0;
}

std::string Increment(std::string s) {
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '9') {
      ++s[i];
      return s;
    }
    s[i] = '0';
  }
  return "1" + s;
}

std::string Decrement(std::string s) {  // s > 0
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '0') {
      --s[i];
      break;
    }
    s[i] = '9';
  }
  while (s.size() > 1 && s[0] == '0') s.erase(0, 1);
  return s;
}

std::string DigitClass(char a, char b) {
  if (a == b) return GbnfLiteral(std::string(1, a));
  if (a == '0' && b == '9') return "[0-9]";
  return std::string("[") + a + "-" + b + "]";
}

// Decimal strings of exactly a.size() digits in [a, b] (a.size() == b.size(), a <= b).
std::string SameLength(const std::string& a, const std::string& b) {
  if (a.empty()) return "\"\"";
  const size_t rest = a.size() - 1;
  if (a[0] == b[0]) {
    return rest == 0
               ? DigitClass(a[0], a[0])
               : GbnfLiteral(std::string(1, a[0])) + " " + SameLength(a.substr(1), b.substr(1));
  }
  const std::string any = rest == 0 ? "" : " [0-9]{" + std::to_string(rest) + "}";
  const bool low_full = a.substr(1) == std::string(rest, '0');
  const bool high_full = b.substr(1) == std::string(rest, '9');
  std::vector<std::string> alts;
  char mid_lo = static_cast<char>(a[0] + 1), mid_hi = static_cast<char>(b[0] - 1);
  if (low_full) {
    mid_lo = a[0];
  } else {
    alts.push_back(GbnfLiteral(std::string(1, a[0])) + " (" +
                   SameLength(a.substr(1), std::string(rest, '9')) + ")");
  }
  if (high_full) mid_hi = b[0];
  if (mid_lo <= mid_hi) alts.push_back(DigitClass(mid_lo, mid_hi) + any);
  if (!high_full) {
    alts.push_back(GbnfLiteral(std::string(1, b[0])) + " (" +
                   SameLength(std::string(rest, '0'), b.substr(1)) + ")");
  }
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return alts.size() == 1 ? out : "(" + out + ")";
}

// Non-negative integers (no leading zeros) in [lo, hi]; hi empty: unbounded.
std::string IntRange(const std::string& lo, const std::string& hi) {
  if (!hi.empty() && CompareDigits(lo, hi) > 0) return std::string(kNothing);
  std::vector<std::string> alts;
  const size_t max_len = hi.empty() ? lo.size() : hi.size();
  for (size_t len = lo.size(); len <= max_len; ++len) {
    std::string a = len == lo.size() ? lo : "1" + std::string(len - 1, '0');
    std::string b = !hi.empty() && len == hi.size() ? hi : std::string(len, '9');
    alts.push_back(SameLength(a, b));
  }
  if (hi.empty()) alts.push_back("[1-9] [0-9]{" + std::to_string(lo.size()) + ",}");
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return alts.size() == 1 ? out : "(" + out + ")";
}

// Fraction digit strings s compared as 0.s with bounds (see FracRule). States: lo index (or
// kSat; an exhausted strict lower bound waits for a nonzero digit), hi index (or kSat, or kZero:
// only zeros may follow).
constexpr int kSat = -1, kDead = -2, kZero = -3;

struct FracBounds {
  std::string lo;  // fraction digits of the lower bound (no trailing zeros)
  bool lo_strict = false;
  bool has_lo = false;
  std::string hi;
  bool hi_strict = false;
  bool has_hi = false;
};

class FracGen {
 public:
  FracGen(const FracBounds& b, Rules& rules) : b_(b), rules_(rules) {}

  int NormLo(int i) const {
    if (i == kSat || i == kDead) return i;
    if (i == static_cast<int>(b_.lo.size()) && !b_.lo_strict) return kSat;
    return i;
  }
  int NormHi(int j) const {
    if (j == kSat || j == kDead || j == kZero) return j;
    if (j == static_cast<int>(b_.hi.size())) return b_.hi_strict ? kDead : kZero;
    return j;
  }
  int Start(bool lo) const {
    return lo ? (b_.has_lo ? NormLo(0) : kSat) : (b_.has_hi ? NormHi(0) : kSat);
  }
  bool EmptyOk(int lo, int hi) const {
    if (lo == kDead || hi == kDead) return false;
    if (lo != kSat) return false;  // remaining lower-bound digits are nonzero (or strict)
    return true;                   // 0 <= any remaining upper bound (kZero: zeros only)
  }
  int NextLo(int i, char c) const {
    if (i == kSat || i == kDead) return i;
    if (i == static_cast<int>(b_.lo.size())) return c > '0' ? kSat : i;  // strict, exhausted
    if (c > b_.lo[i]) return kSat;
    if (c < b_.lo[i]) return kDead;
    return NormLo(i + 1);
  }
  int NextHi(int j, char c) const {
    if (j == kSat || j == kDead) return j;
    if (j == kZero) return c == '0' ? kZero : kDead;
    if (c < b_.hi[j]) return kSat;
    if (c > b_.hi[j]) return kDead;
    return NormHi(j + 1);
  }

  // Digit strings from state (lo, hi); empty allowed only when `allow_empty` and the bounds
  // hold for a zero remainder. Returns a GBNF expression, or "" for the empty language.
  std::string Expr(int lo, int hi, bool allow_empty) {
    if (lo == kDead || hi == kDead) return "";
    if (lo == kSat && hi == kSat) return allow_empty ? "[0-9]*" : "[0-9]+";
    const auto key = std::make_tuple(lo, hi, allow_empty);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    const std::string name = rules_.Reserve("frac");
    memo_[key] = name;
    std::vector<std::string> alts;
    if (allow_empty && EmptyOk(lo, hi)) alts.push_back("\"\"");
    char c = '0';
    while (c <= '9') {
      const int nl = NextLo(lo, c), nh = NextHi(hi, c);
      char e = c;
      while (e < '9' && NextLo(lo, static_cast<char>(e + 1)) == nl &&
             NextHi(hi, static_cast<char>(e + 1)) == nh) {
        ++e;
      }
      const std::string rest = Expr(nl, nh, true);
      if (!rest.empty()) alts.push_back(DigitClass(c, e) + " " + rest);
      c = static_cast<char>(e + 1);
    }
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
    rules_.Define(name, alts.empty() ? std::string(kNothing) : body);
    if (alts.empty()) memo_[key] = "";
    return alts.empty() ? "" : name;
  }

 private:
  const FracBounds& b_;
  Rules& rules_;
  std::map<std::tuple<int, int, bool>, std::string> memo_;
};

struct MagBound {
  Dec d;  // magnitude (neg ignored)
  bool strict = false;
};

// Non-negative decimals (fixed notation: int part, optional fraction) in the range.
std::string MagRange(const std::optional<MagBound>& lo, const std::optional<MagBound>& hi,
                     bool integer, Rules& rules) {
  const std::string il = lo ? lo->d.ip : "0";
  std::vector<std::string> alts;
  auto frac_part = [&](const FracBounds& fb) -> std::string {
    FracGen gen(fb, rules);
    const int l = gen.Start(true), h = gen.Start(false);
    const bool empty_ok = gen.EmptyOk(l, h);
    if (integer) return empty_ok ? "\"\"" : "";
    const std::string f = gen.Expr(l, h, false);
    if (f.empty()) return empty_ok ? "\"\"" : "";
    return empty_ok ? "(\".\" " + f + ")?" : "\".\" " + f;
  };
  const std::string any_frac = integer ? "" : " (\".\" [0-9]+)?";
  // Integer parts strictly inside the bounds take any fraction.
  const std::string mid_lo = Increment(il);
  if (!hi) {
    alts.push_back(IntRange(mid_lo, "") + any_frac);
  } else if (hi->d.ip != "0" && CompareDigits(mid_lo, Decrement(hi->d.ip)) <= 0) {
    alts.push_back(IntRange(mid_lo, Decrement(hi->d.ip)) + any_frac);
  }
  FracBounds low;
  if (lo) {
    low.has_lo = true;
    low.lo = lo->d.fp;
    low.lo_strict = lo->strict;
  }
  if (hi && hi->d.ip == il) {
    low.has_hi = true;
    low.hi = hi->d.fp;
    low.hi_strict = hi->strict;
    const std::string f = frac_part(low);
    if (!f.empty()) alts.push_back(GbnfLiteral(il) + " " + f);
  } else {
    if (!hi || CompareDigits(il, hi->d.ip) < 0) {
      const std::string f = frac_part(low);
      if (!f.empty()) alts.push_back(GbnfLiteral(il) + " " + f);
    }
    if (hi && CompareDigits(il, hi->d.ip) < 0) {
      FracBounds high;
      high.has_hi = true;
      high.hi = hi->d.fp;
      high.hi_strict = hi->strict;
      const std::string f = frac_part(high);
      if (!f.empty()) alts.push_back(GbnfLiteral(hi->d.ip) + " " + f);
    }
  }
  if (alts.empty()) return "";
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return "(" + out + ")";
}

}  // namespace

std::string NumberGbnf(const Json& minimum, bool min_exclusive, const Json& maximum,
                       bool max_exclusive, bool integer, Rules& rules) {
  if (minimum.is_null() && maximum.is_null()) {
    return integer
               ? rules.Shared("j--integer", R"("-"? ("0" | [1-9] [0-9]*))")
               : rules.Shared("j--number",
                              R"("-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?)");
  }
  std::optional<Dec> lo, hi;
  if (!minimum.is_null()) lo = ToDec(minimum, "minimum");
  if (!maximum.is_null()) hi = ToDec(maximum, "maximum");
  std::vector<std::string> parts;
  // Non-negative values.
  if (!hi || !hi->neg) {
    std::optional<MagBound> a, b;
    if (lo && !lo->neg) a = MagBound{*lo, min_exclusive};
    if (hi) b = MagBound{*hi, max_exclusive};
    const std::string p = MagRange(a, b, integer, rules);
    if (!p.empty()) parts.push_back(p);
  }
  // Negative values: "-" then a magnitude in (|hi| or 0, |lo|].
  if (!lo || lo->neg) {
    std::optional<MagBound> a = MagBound{Dec{}, true}, b;
    if (hi && hi->neg) a = MagBound{*hi, max_exclusive};
    if (lo) b = MagBound{*lo, min_exclusive};
    const std::string p = MagRange(a, b, integer, rules);
    if (!p.empty()) parts.push_back("\"-\" " + p);
  }
  if (parts.empty()) return std::string(kNothing);
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
  return parts.size() == 1 ? out : "(" + out + ")";
}

std::string FormatGbnf(std::string_view format, bool raw) {
  static const std::string kDate =
      R"([0-9]{4} "-" ( ("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | [12] [0-9]) ))";
  static const std::string kTime =
      R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" ([0-5] [0-9] | "60") ("." [0-9]+)? ([Zz] | [-+] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))";
  if (format == "date") return "(" + kDate + ")";
  if (format == "time") return "(" + kTime + ")";
  if (format == "date-time") return "(" + kDate + " [Tt] " + kTime + ")";
  if (format == "uuid") {
    return R"(([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}))";
  }
  if (format == "email") {
    return R"(([A-Za-z0-9!#$%&'*+/=?^_`{|}~\-]+ ("." [A-Za-z0-9!#$%&'*+/=?^_`{|}~\-]+)* "@" [A-Za-z0-9] ([A-Za-z0-9\-]* [A-Za-z0-9])? ("." [A-Za-z0-9] ([A-Za-z0-9\-]* [A-Za-z0-9])?)*))";
  }
  if (format == "ipv4") {
    static const std::string kOctet =
        R"(("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9]))";
    return "(" + kOctet + " \".\" " + kOctet + " \".\" " + kOctet + " \".\" " + kOctet + ")";
  }
  if (format == "hostname") {
    return R"(([A-Za-z0-9] ([A-Za-z0-9\-]{0,61} [A-Za-z0-9])? ("." [A-Za-z0-9] ([A-Za-z0-9\-]{0,61} [A-Za-z0-9])?)*))";
  }
  // RFC 6901: "/"-separated reference tokens; '~' only as ~0 or ~1.
  const std::string pointer = "(\"/\" (" +
                              CodepointSetGbnf({{0, '.'}, {'0', '}'}, {0x7F, 0x10FFFF}}, raw) +
                              " | \"~\" [01])*)*";
  if (format == "json-pointer") return "(" + pointer + ")";
  if (format == "relative-json-pointer") {
    return "((\"0\" | [1-9] [0-9]*) (\"#\" | " + pointer + "))";
  }
  return "";
}

}  // namespace json_internal

std::string GbnfLiteral(std::string_view text) { return json_internal::GbnfLiteral(text); }

std::string GbnfNotContaining(std::string_view word) {
  std::vector<char32_t> w;
  for (size_t i = 0; i < word.size();) {
    char32_t cp = 0;
    const int n = DecodeUtf8At(word, i, cp);
    Check(n > 0, "GbnfNotContaining: '{}' is not valid UTF-8", word);
    w.push_back(cp);
    i += static_cast<size_t>(n);
  }
  Check(!w.empty() && std::count(w.begin(), w.end(), w[0]) == 1,
        "GbnfNotContaining: the first character of '{}' must occur once", word);
  // States of the matching automaton: 0, or k >= 1 characters of `word` matched. Text returns
  // to state 0 by a character other than w0 (A: after w0 and a proper prefix of the rest, a
  // character that neither continues nor restarts), to state 1 by w0 (B), or ends (E).
  const size_t n = w.size();
  auto prefix = [&](size_t j) {
    std::string s;
    for (size_t k = 1; k <= j; ++k) AppendUtf8(w[k], s);
    return s.empty() ? std::string() : json_internal::GbnfLiteral(s) + " ";
  };
  auto cls = [&](std::initializer_list<char32_t> except) {
    std::string c = "[^";
    for (char32_t x : except) c += json_internal::GbnfClassChar(x);
    return c + "]";
  };
  std::string w0;
  AppendUtf8(w[0], w0);
  const std::string lead = json_internal::GbnfLiteral(w0);
  if (n == 1) return "(" + cls({w[0]}) + ")*";
  std::string a, b, e = "\"\"";
  for (size_t j = 0; j + 1 < n; ++j) {
    a += (j ? " | " : "") + prefix(j) + cls({w[0], w[j + 1]});
    b += (j ? " | " : "") + prefix(j) + lead;
    if (j > 0) e += " | " + prefix(j);
  }
  return "(" + cls({w[0]}) + " | " + lead + " (" + b + ")* (" + a + "))* (" + lead + " (" + b +
         ")* (" + e + "))?";
}

}  // namespace crossword::grammar
