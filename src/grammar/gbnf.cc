// GBNF parser (llama.cpp's grammar syntax, grammars/README.md of llama.cpp) into byte grammars.
#include <string>
#include <vector>

#include "base/utf8.h"
#include "grammar/grammar.h"

namespace crossword::grammar {
namespace {

bool IsWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

class Parser {
 public:
  Parser(std::string_view text, const GrammarLimits& limits) : text_(text), limits_(limits) {}

  Grammar Run() {
    if (text_.size() > limits_.max_text_bytes) {
      FailGrammar(ErrorKind::kTooLarge, "grammar: the text is {} bytes; the limit is {} bytes",
                  text_.size(), limits_.max_text_bytes);
    }
    SkipSpace(true);
    while (!AtEnd()) ParseRule();
    first_use_.resize(g_.rules.size(), 0);
    for (size_t i = 0; i < g_.rules.size(); ++i) {
      const Rule& r = g_.rules[i];
      if (!r.defined) {
        auto [line, col] = LineCol(first_use_[i]);
        FailGrammar(ErrorKind::kUndefinedRule,
                    "grammar: line {}, column {}: rule '{}' is used but never defined", line, col,
                    r.name);
      }
    }
    auto it = g_.rule_index.find("root");
    if (it == g_.rule_index.end()) {
      FailGrammar(ErrorKind::kUndefinedRule,
                  "grammar: there is no 'root' rule (the start rule must be called root)");
    }
    g_.root = it->second;
    return std::move(g_);
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }

  std::pair<size_t, size_t> LineCol(size_t at) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return {line, col};
  }

  std::string Found() const {
    if (AtEnd()) return "the end of the text";
    const char c = Peek();
    if (c == '\n') return "a newline";
    if (c == '\r') return "a carriage return";
    if (static_cast<unsigned char>(c) < 0x20) return fmt::format("byte 0x{:02X}", c);
    char32_t cp = 0;
    const int n = DecodeUtf8At(text_, pos_, cp);
    return fmt::format("'{}'", n > 0 ? text_.substr(pos_, n) : std::string_view("?"));
  }

  template <typename... Args>
  [[noreturn]] void Error(ErrorKind kind, size_t at, fmt::format_string<Args...> f,
                          Args&&... args) {
    auto [line, col] = LineCol(at);
    FailGrammar(kind, "grammar: line {}, column {}: {}", line, col,
                fmt::format(f, std::forward<Args>(args)...));
  }

  void SkipSpace(bool newline_ok) {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\r' && Peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view ParseName() {
    const size_t start = pos_;
    while (!AtEnd() && IsWordChar(Peek())) ++pos_;
    if (pos_ == start) {
      Error(ErrorKind::kSyntax, start, "expected a rule name (letters, digits, '-'), found {}",
            Found());
    }
    return text_.substr(start, pos_ - start);
  }

  void ParseRule() {
    const size_t start = pos_;
    const std::string_view name = ParseName();
    SkipSpace(false);
    if (text_.substr(pos_, 3) != "::=") {
      Error(ErrorKind::kSyntax, pos_, "expected '::=' after the rule name '{}', found {}", name,
            Found());
    }
    pos_ += 3;
    SkipSpace(true);
    const uint32_t id = g_.RuleId(name);
    Rule& r = g_.rules[id];
    if (r.defined) {
      Error(ErrorKind::kSyntax, start, "rule '{}' is defined twice (first at line {})", name,
            r.line);
    }
    auto [line, col] = LineCol(start);
    r.defined = true;
    r.line = static_cast<uint32_t>(line);
    r.column = static_cast<uint32_t>(col);
    const uint32_t body = ParseAlternates(false, 0);
    g_.rules[id].body = body;
    if (!AtEnd()) {
      if (Peek() == '\r') {
        pos_ += Peek(1) == '\n' ? 2 : 1;
      } else if (Peek() == '\n') {
        ++pos_;
      } else {
        Error(ErrorKind::kSyntax, pos_, "expected a newline or the end after rule '{}', found {}",
              name, Found());
      }
    }
    SkipSpace(true);
  }

  uint32_t ParseAlternates(bool nested, uint32_t depth) {
    std::vector<uint32_t> alts{ParseSequence(nested, depth)};
    while (Peek() == '|') {
      ++pos_;
      SkipSpace(true);
      alts.push_back(ParseSequence(nested, depth));
    }
    return alts.size() == 1 ? alts[0] : g_.Alt(std::move(alts));
  }

  // One character of a literal or class: an escape or a UTF-8 encoded code point.
  char32_t ParseChar() {
    const size_t start = pos_;
    if (AtEnd()) Error(ErrorKind::kSyntax, pos_, "unexpected end of the text");
    if (Peek() == '\\') {
      const char e = Peek(1);
      pos_ += 2;
      switch (e) {
        case 'x':
          return ParseHex(2, start);
        case 'u':
          return ParseHex(4, start);
        case 'U':
          return ParseHex(8, start);
        case 't':
          return '\t';
        case 'r':
          return '\r';
        case 'n':
          return '\n';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
          return static_cast<char32_t>(e);
        default:
          pos_ = start;
          Error(ErrorKind::kSyntax, start,
                "unknown escape (known: \\n \\r \\t \\\\ \\\" \\[ \\] \\- \\xHH \\uHHHH "
                "\\UHHHHHHHH)");
      }
    }
    if (Peek() == '\0') Error(ErrorKind::kSyntax, pos_, "NUL byte in the grammar text");
    char32_t cp = 0;
    const int n = DecodeUtf8At(text_, pos_, cp);
    if (n == 0) Error(ErrorKind::kSyntax, pos_, "the grammar text is not valid UTF-8 here");
    pos_ += n;
    return cp;
  }

  char32_t ParseHex(int digits, size_t start) {
    char32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = Peek();
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        Error(ErrorKind::kSyntax, start, "expected {} hex digits in this escape", digits);
      }
      v = v * 16 + static_cast<char32_t>(d);
      ++pos_;
    }
    if (v > 0x10FFFF)
      Error(ErrorKind::kSyntax, start, "code point U+{:X} is past U+10FFFF",
            static_cast<uint32_t>(v));
    return v;
  }

  uint32_t ParseLiteral() {
    const size_t start = pos_;
    ++pos_;  // opening quote
    std::string bytes;
    while (Peek() != '"') {
      if (AtEnd()) Error(ErrorKind::kSyntax, start, "string literal is not closed");
      const size_t at = pos_;
      const char32_t cp = ParseChar();
      if (cp >= 0xD800 && cp <= 0xDFFF) {
        Error(ErrorKind::kSyntax, at, "code point U+{:X} is a surrogate, not a character",
              static_cast<uint32_t>(cp));
      }
      AppendUtf8(cp, bytes);
    }
    ++pos_;
    if (bytes.empty()) return g_.Seq({});
    return g_.Literal(bytes);
  }

  uint32_t ParseClass() {
    const size_t start = pos_;
    ++pos_;  // [
    bool negate = false;
    if (Peek() == '^') {
      negate = true;
      ++pos_;
    }
    std::vector<std::pair<char32_t, char32_t>> ranges;
    while (Peek() != ']') {
      if (AtEnd()) Error(ErrorKind::kSyntax, start, "character class is not closed");
      const char32_t lo = ParseChar();
      char32_t hi = lo;
      if (Peek() == '-' && Peek(1) != ']') {
        ++pos_;
        if (AtEnd()) Error(ErrorKind::kSyntax, start, "character class is not closed");
        const size_t at = pos_;
        hi = ParseChar();
        if (hi < lo) {
          Error(ErrorKind::kSyntax, at, "range end U+{:04X} is below its start U+{:04X}",
                static_cast<uint32_t>(hi), static_cast<uint32_t>(lo));
        }
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;
    return g_.Codepoints(std::move(ranges), negate);
  }

  uint32_t ParseCount(size_t start) {
    uint64_t v = 0;
    while (IsDigit(Peek())) {
      v = v * 10 + static_cast<uint64_t>(Peek() - '0');
      if (v > limits_.max_repeat) {
        Error(ErrorKind::kTooLarge, start, "repetition count is above the limit of {}",
              limits_.max_repeat);
      }
      ++pos_;
    }
    return static_cast<uint32_t>(v);
  }

  // {m} {m,} {m,n} {,n}
  uint32_t ParseBraces(uint32_t item, bool nested) {
    const size_t start = pos_;
    ++pos_;
    SkipSpace(nested);
    uint32_t min = 0, max;
    const bool has_min = IsDigit(Peek());
    if (has_min) min = ParseCount(start);
    SkipSpace(nested);
    if (Peek() == '}') {
      if (!has_min) Error(ErrorKind::kSyntax, start, "expected a count inside '{{}}'");
      max = min;
    } else if (Peek() == ',') {
      ++pos_;
      SkipSpace(nested);
      max = IsDigit(Peek()) ? ParseCount(start) : kUnbounded;
      SkipSpace(nested);
      if (Peek() != '}') Error(ErrorKind::kSyntax, pos_, "expected '}}', found {}", Found());
      if (max < min) {
        Error(ErrorKind::kSyntax, start, "repetition {{{},{}}} has its maximum below its minimum",
              min, max);
      }
    } else {
      Error(ErrorKind::kSyntax, pos_, "expected ',' or '}}' in a repetition, found {}", Found());
    }
    ++pos_;
    return g_.Repeat(item, min, max);
  }

  uint32_t ParseSequence(bool nested, uint32_t depth) {
    std::vector<uint32_t> items;
    while (!AtEnd()) {
      const char c = Peek();
      const size_t at = pos_;
      if (c != '*' && c != '+' && c != '?' && c != '{') postfix_ = 0;
      if (c == '"') {
        items.push_back(ParseLiteral());
      } else if (c == '[') {
        items.push_back(ParseClass());
      } else if (c == '.') {
        ++pos_;
        if (any_ == UINT32_MAX) any_ = g_.Codepoints({{0, 0x10FFFF}});
        items.push_back(any_);
      } else if (IsWordChar(c)) {
        const std::string_view name = ParseName();
        const uint32_t id = g_.RuleId(name);
        if (first_use_.size() <= id) first_use_.resize(id + 1, 0);
        if (!g_.rules[id].defined && first_use_[id] == 0) first_use_[id] = at;
        items.push_back(g_.Ref(id));
      } else if (c == '(') {
        if (depth + 1 > limits_.max_nesting) {
          Error(ErrorKind::kTooLarge, at, "parentheses nest deeper than {} levels",
                limits_.max_nesting);
        }
        ++pos_;
        SkipSpace(true);
        const uint32_t inner = ParseAlternates(true, depth + 1);
        if (Peek() != ')') {
          Error(ErrorKind::kSyntax, pos_, "expected ')' to close the group at line {}, found {}",
                LineCol(at).first, Found());
        }
        ++pos_;
        items.push_back(inner);
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (items.empty()) {
          Error(ErrorKind::kSyntax, at, "'{}' must follow an item to repeat", c);
        }
        if (++postfix_ > limits_.max_nesting) {
          Error(ErrorKind::kTooLarge, at, "more than {} repetition operators on one item",
                limits_.max_nesting);
        }
        uint32_t& last = items.back();
        if (c == '{') {
          last = ParseBraces(last, nested);
        } else {
          ++pos_;
          last = g_.Repeat(last, c == '+' ? 1 : 0, c == '?' ? 1 : kUnbounded);
        }
      } else if (c == '<' || c == '!') {
        FailGrammar(ErrorKind::kUnsupported,
                    "grammar: line {}, column {}: token references (<[id]>, <text>, !<...>) are "
                    "not supported; write the token's text as a string literal",
                    LineCol(at).first, LineCol(at).second);
      } else {
        break;
      }
      SkipSpace(nested);
    }
    if (items.size() == 1) return items[0];
    return g_.Seq(std::move(items));
  }

  std::string_view text_;
  GrammarLimits limits_;
  size_t pos_ = 0;
  Grammar g_;
  std::vector<size_t> first_use_;
  uint32_t any_ = UINT32_MAX;
  uint32_t postfix_ = 0;  // repetition operators applied to the current last item
};

}  // namespace

Grammar ParseGbnf(std::string_view text, const GrammarLimits& limits) {
  return Parser(text, limits).Run();
}

}  // namespace crossword::grammar
