// JSON Schema `pattern` (an ECMA-262 regular expression, subset) -> GBNF over the canonical JSON
// encoding of the string's characters.
#include <algorithm>

#include "base/utf8.h"
#include "grammar/json_internal.h"

namespace crossword::grammar::json_internal {
namespace {

using Ranges = std::vector<std::pair<char32_t, char32_t>>;

constexpr uint32_t kMaxRegexNesting = 32;

Ranges Complement(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  char32_t next = 0;
  for (auto [a, b] : r) {
    if (b < next) continue;
    if (a > next) out.emplace_back(next, a - 1);
    next = b + 1;
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}

const Ranges& Digits() {
  static const Ranges r{{'0', '9'}};
  return r;
}
const Ranges& Word() {
  static const Ranges r{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return r;
}
const Ranges& Space() {  // ECMA-262 WhiteSpace and LineTerminator
  static const Ranges r{{0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680},
                        {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                        {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
  return r;
}

class RegexParser {
 public:
  RegexParser(std::string_view p, std::string_view where, Rules& rules, bool raw)
      : p_(p), where_(where), rules_(rules), raw_(raw) {}

  std::string Run() {
    std::string out;
    std::vector<std::string> alts;
    while (true) {
      bool start_anchor = false, end_anchor = false;
      if (Peek() == '^') {
        start_anchor = true;
        ++pos_;
      }
      std::string seq = Sequence(0, &end_anchor);
      const std::string any = CharRule(rules_, raw_) + "*";
      alts.push_back((start_anchor ? "" : any + " ") + "(" + seq + ")" +
                     (end_anchor ? "" : " " + any));
      if (pos_ >= p_.size()) break;
      if (Peek() == '|') {
        ++pos_;
        continue;
      }
      Error(ErrorKind::kSyntax, "unexpected ')'");
    }
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return alts.size() == 1 ? out : "(" + out + ")";
  }

 private:
  char Peek(size_t k = 0) const { return pos_ + k < p_.size() ? p_[pos_ + k] : '\0'; }
  bool AtEnd() const { return pos_ >= p_.size(); }

  template <typename... Args>
  [[noreturn]] void Error(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
    FailGrammar(kind, "json schema: {}: pattern '{}' at offset {}: {}", where_, p_, pos_,
                fmt::format(f, std::forward<Args>(args)...));
  }

  // Alternatives inside a group (or the whole pattern with `end_anchor` set at depth 0).
  std::string Alternation(uint32_t depth) {
    std::vector<std::string> alts{Sequence(depth, nullptr)};
    while (Peek() == '|') {
      ++pos_;
      alts.push_back(Sequence(depth, nullptr));
    }
    std::string out;
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return "(" + out + ")";
  }

  std::string Sequence(uint32_t depth, bool* end_anchor) {
    std::vector<std::string> items;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      if (Peek() == '$') {
        ++pos_;
        if (end_anchor == nullptr || !(AtEnd() || Peek() == '|')) {
          Error(ErrorKind::kUnsupported, "'$' is supported only at the end of the pattern");
        }
        *end_anchor = true;
        break;
      }
      if (Peek() == '^') Error(ErrorKind::kUnsupported, "'^' is supported only at the start");
      std::string atom = Atom(depth);
      // Quantifiers.
      while (!AtEnd() && (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{')) {
        const char q = Peek();
        if (q == '{') {
          size_t save = pos_;
          uint32_t lo = 0, hi = 0;
          bool ok = Braces(lo, hi);
          if (!ok) {  // a literal '{' as ECMA (Annex B) reads it
            pos_ = save;
            break;
          }
          atom = "(" + atom + "){" + std::to_string(lo) +
                 (hi == kUnbounded ? ","
                  : lo == hi       ? ""
                                   : "," + std::to_string(hi)) +
                 "}";
        } else {
          ++pos_;
          atom = "(" + atom + ")" + std::string(1, q);
        }
        if (Peek() == '?') ++pos_;  // lazy: the same language
      }
      items.push_back(atom);
    }
    if (items.empty()) return "\"\"";
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) out += (i ? " " : "") + items[i];
    return out;
  }

  bool Braces(uint32_t& lo, uint32_t& hi) {
    ++pos_;
    auto number = [&](uint32_t& v) {
      if (!(Peek() >= '0' && Peek() <= '9')) return false;
      uint64_t x = 0;
      while (Peek() >= '0' && Peek() <= '9') {
        x = x * 10 + static_cast<uint64_t>(Peek() - '0');
        if (x > 1000) Error(ErrorKind::kTooLarge, "repetition count above 1000");
        ++pos_;
      }
      v = static_cast<uint32_t>(x);
      return true;
    };
    if (!number(lo)) return false;
    hi = lo;
    if (Peek() == ',') {
      ++pos_;
      if (!number(hi)) hi = kUnbounded;
    }
    if (Peek() != '}') return false;
    ++pos_;
    if (hi < lo) Error(ErrorKind::kSyntax, "repetition {{{},{}}} out of order", lo, hi);
    return true;
  }

  char32_t Utf8Char() {
    char32_t cp = 0;
    const int n = DecodeUtf8At(p_, pos_, cp);
    if (n == 0) Error(ErrorKind::kSyntax, "invalid UTF-8");
    pos_ += static_cast<size_t>(n);
    return cp;
  }

  char32_t Hex(int digits) {
    char32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = Peek();
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) Error(ErrorKind::kSyntax, "expected {} hex digits", digits);
      v = v * 16 + static_cast<char32_t>(d);
      ++pos_;
    }
    return v;
  }

  // An escape after '\' (pos_ at the escaped character). Sets `set` for class escapes.
  Ranges Escape(bool in_class) {
    const char c = Peek();
    ++pos_;
    switch (c) {
      case 'd':
        return Digits();
      case 'D':
        return Complement(Digits());
      case 'w':
        return Word();
      case 'W':
        return Complement(Word());
      case 's':
        return Space();
      case 'S':
        return Complement(Space());
      case 't':
        return {{'\t', '\t'}};
      case 'n':
        return {{'\n', '\n'}};
      case 'r':
        return {{'\r', '\r'}};
      case 'f':
        return {{'\f', '\f'}};
      case 'v':
        return {{'\v', '\v'}};
      case '0':
        if (Peek() >= '0' && Peek() <= '9') Error(ErrorKind::kUnsupported, "octal escapes");
        return {{0, 0}};
      case 'x': {
        const char32_t v = Hex(2);
        return {{v, v}};
      }
      case 'u': {
        const char32_t v = Hex(4);
        return {{v, v}};
      }
      case 'b':
        if (in_class) return {{'\b', '\b'}};
        Error(ErrorKind::kUnsupported, "word boundaries (\\b) are not supported");
      case 'B':
        Error(ErrorKind::kUnsupported, "word boundaries (\\B) are not supported");
      default:
        break;
    }
    if ((c >= '1' && c <= '9') || c == 'k') {
      Error(ErrorKind::kUnsupported, "back-references are not supported");
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      Error(ErrorKind::kUnsupported, "the escape \\{} is not supported", c);
    }
    --pos_;
    const char32_t cp = Utf8Char();  // an escaped literal: \. \\ \/ \- ...
    return {{cp, cp}};
  }

  std::string Atom(uint32_t depth) {
    const char c = Peek();
    if (c == '(') {
      if (depth + 1 > kMaxRegexNesting) {
        Error(ErrorKind::kTooLarge, "groups nest deeper than {}", kMaxRegexNesting);
      }
      ++pos_;
      if (Peek() == '?') {
        if (Peek(1) == ':') {
          pos_ += 2;
        } else if (Peek(1) == '<' && Peek(2) != '=' && Peek(2) != '!') {
          const size_t close = p_.find('>', pos_);
          if (close == std::string_view::npos) Error(ErrorKind::kSyntax, "unclosed group name");
          pos_ = close + 1;
        } else {
          Error(ErrorKind::kUnsupported, "lookaround assertions are not supported");
        }
      }
      std::string inner = Alternation(depth + 1);
      if (Peek() != ')') Error(ErrorKind::kSyntax, "missing ')'");
      ++pos_;
      return inner;
    }
    if (c == '[') return CodepointSetGbnf(Class(), raw_);
    if (c == '.') {
      ++pos_;
      return CodepointSetGbnf(Complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}), raw_);
    }
    if (c == '\\') {
      ++pos_;
      if (AtEnd()) Error(ErrorKind::kSyntax, "trailing backslash");
      return CodepointSetGbnf(Escape(false), raw_);
    }
    if (c == '*' || c == '+' || c == '?') Error(ErrorKind::kSyntax, "nothing to repeat");
    const char32_t cp = Utf8Char();
    return CodepointSetGbnf({{cp, cp}}, raw_);
  }

  Ranges Class() {
    ++pos_;  // [
    bool negate = false;
    if (Peek() == '^') {
      negate = true;
      ++pos_;
    }
    Ranges r;
    bool first = true;
    while (first || Peek() != ']') {
      first = false;
      if (AtEnd()) Error(ErrorKind::kSyntax, "unclosed character class");
      if (Peek() == ']') break;
      Ranges lo_set;
      if (Peek() == '\\') {
        ++pos_;
        lo_set = Escape(true);
      } else {
        const char32_t cp = Utf8Char();
        lo_set = {{cp, cp}};
      }
      if (Peek() == '-' && Peek(1) != ']' && Peek(1) != '\0' && lo_set.size() == 1 &&
          lo_set[0].first == lo_set[0].second) {
        ++pos_;
        Ranges hi_set;
        if (Peek() == '\\') {
          ++pos_;
          hi_set = Escape(true);
        } else {
          const char32_t cp = Utf8Char();
          hi_set = {{cp, cp}};
        }
        if (hi_set.size() != 1 || hi_set[0].first != hi_set[0].second) {
          Error(ErrorKind::kSyntax, "a class escape cannot end a range");
        }
        if (hi_set[0].first < lo_set[0].first) Error(ErrorKind::kSyntax, "range out of order");
        r.emplace_back(lo_set[0].first, hi_set[0].first);
        continue;
      }
      r.insert(r.end(), lo_set.begin(), lo_set.end());
    }
    ++pos_;  // ]
    return negate ? Complement(r) : r;
  }

  std::string_view p_;
  std::string_view where_;
  Rules& rules_;
  bool raw_;
  size_t pos_ = 0;
};

}  // namespace

std::string RegexGbnf(std::string_view pattern, std::string_view where, Rules& rules, bool raw) {
  if (pattern.size() > 4096) {
    FailGrammar(ErrorKind::kTooLarge, "json schema: {}: pattern longer than 4096 bytes", where);
  }
  return RegexParser(pattern, where, rules, raw).Run();
}

}  // namespace crossword::grammar::json_internal
