// Jinja2 lexer: whitespace control ('-', '+', trim_blocks, lstrip_blocks), comments, raw blocks,
// and expression tokens (names, numbers, Python string literals, operators with bracket balance).
#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "chat/template.h"

namespace crossword::chat::jinja {

SourceMap::SourceMap(const std::string& source) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\n') line_starts_.push_back(i + 1);
  }
}

void SourceMap::Location(size_t pos, int* line, int* column) const {
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
  size_t idx = static_cast<size_t>(it - line_starts_.begin()) - 1;
  *line = static_cast<int>(idx) + 1;
  *column = static_cast<int>(pos - line_starts_[idx]) + 1;
}

void SourceMap::Error(size_t pos, const std::string& message) const {
  int line, column;
  Location(pos, &line, &column);
  throw TemplateError(
      fmt::format("chat template syntax error at line {}, column {}: {}", line, column, message));
}

namespace {

bool IsSpaceAt(std::string_view s, size_t i, size_t* len) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    *len = 1;
    return IsPySpace(c);
  }
  // Multi-byte whitespace (U+0085, U+00A0, U+2000.., U+3000): decode one code point.
  auto cps = DecodeUtf8(s.substr(i, std::min<size_t>(4, s.size() - i)));
  std::string enc;
  AppendUtf8(enc, cps[0]);
  *len = enc.size();
  return IsPySpace(cps[0]);
}

// Python's str.rstrip() (Unicode whitespace).
std::string_view RStripPy(std::string_view s) {
  auto cps = DecodeUtf8(s);
  size_t end = cps.size();
  while (end > 0 && IsPySpace(cps[end - 1])) --end;
  return s.substr(0, EncodeUtf8(cps, 0, end).size());
}

size_t SkipSpaces(std::string_view s, size_t i) {
  size_t len;
  while (i < s.size() && IsSpaceAt(s, i, &len)) i += len;
  return i;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // Jinja2 splits on \r\n, \r, \n, joins with \n and drops one trailing line break.
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_.push_back('\n');
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_.push_back(source[i]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    map_ = std::make_unique<SourceMap>(src_);
  }

  std::unique_ptr<SourceMap> TakeMap() { return std::move(map_); }

  [[noreturn]] void Error(size_t pos, const std::string& message) const {
    map_->Error(pos, message);
  }

  std::vector<Token> Run() {
    std::string_view s = src_;
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s.size()) {
      size_t tag = FindTag(s, pos);
      if (tag == std::string_view::npos) {
        Emit(Tok::kData, std::string(s.substr(pos)), pos);
        break;
      }
      char kind = s[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < s.size() && (s[tag + 2] == '-' || s[tag + 2] == '+') ? s[tag + 2] : 0;
      std::string_view text = s.substr(pos, tag - pos);
      bool raw = kind == '%' && IsRawTag(s, tag + 2 + (sign ? 1 : 0), nullptr);
      text = StripBeforeTag(text, sign, kind != '{', line_starting);
      if (!text.empty()) Emit(Tok::kData, std::string(text), pos);
      size_t body = tag + 2 + (sign ? 1 : 0);
      if (raw) {
        pos = LexRaw(s, body, &line_starting);
      } else if (kind == '#') {
        pos = LexComment(s, tag, body, &line_starting);
      } else {
        pos = LexTag(s, tag, body, kind == '%', &line_starting);
      }
    }
    Emit(Tok::kEof, "", s.size());
    return std::move(tokens_);
  }

 private:
  void Emit(Tok type, std::string text, size_t pos) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.pos = pos;
    tokens_.push_back(std::move(t));
  }

  static size_t FindTag(std::string_view s, size_t from) {
    for (size_t i = s.find('{', from); i != std::string_view::npos; i = s.find('{', i + 1)) {
      if (i + 1 < s.size() && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) return i;
    }
    return std::string_view::npos;
  }

  // Matches `\s*raw\s*(-%}\s*|%})` at `at`; sets *end past it.
  static bool IsRawTag(std::string_view s, size_t at, size_t* end) {
    size_t i = SkipSpaces(s, at);
    if (s.substr(i, 3) != "raw") return false;
    i = SkipSpaces(s, i + 3);
    if (s.substr(i, 3) == "-%}") {
      if (end) *end = SkipSpaces(s, i + 3);
      return true;
    }
    if (s.substr(i, 2) == "%}") {
      if (end) *end = i + 2;
      return true;
    }
    return false;
  }

  // The data before a tag: '-' strips all trailing whitespace; lstrip_blocks removes the
  // indentation of a block/comment tag that starts its line (unless the tag says '+').
  static std::string_view StripBeforeTag(std::string_view text, char sign, bool lstrip_kind,
                                         bool line_starting) {
    if (sign == '-') return RStripPy(text);
    if (sign == '+' || !lstrip_kind) return text;
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return text;
    std::string_view tail = text.substr(l_pos);
    if (tail.empty() || SkipSpaces(tail, 0) != tail.size()) return text;
    return text.substr(0, l_pos);
  }

  // After `%}`-style ends: '-' eats all following whitespace, trim_blocks one newline.
  static size_t AfterEnd(std::string_view s, size_t end, char sign, bool trim,
                         bool* line_starting) {
    size_t next = end;
    if (sign == '-') {
      next = SkipSpaces(s, end);
    } else if (sign != '+' && trim && end < s.size() && s[end] == '\n') {
      next = end + 1;
    }
    *line_starting = next > 0 && s[next - 1] == '\n';
    return next;
  }

  size_t LexComment(std::string_view s, size_t tag, size_t body, bool* line_starting) {
    size_t end = s.find("#}", body);
    if (end == std::string_view::npos) Error(tag, "missing end of comment tag '#}'");
    char sign = end > body && (s[end - 1] == '-' || s[end - 1] == '+') ? s[end - 1] : 0;
    return AfterEnd(s, end + 2, sign, true, line_starting);
  }

  size_t LexRaw(std::string_view s, size_t body, bool* line_starting) {
    size_t start = body;
    IsRawTag(s, body, &start);
    bool starting = start > 0 && s[start - 1] == '\n';
    for (size_t i = s.find("{%", start); i != std::string_view::npos; i = s.find("{%", i + 1)) {
      char sign = i + 2 < s.size() && (s[i + 2] == '-' || s[i + 2] == '+') ? s[i + 2] : 0;
      size_t j = SkipSpaces(s, i + 2 + (sign ? 1 : 0));
      if (s.substr(j, 6) != "endraw") continue;
      j = SkipSpaces(s, j + 6);
      char end_sign = 0;
      if (j < s.size() && (s[j] == '-' || s[j] == '+')) end_sign = s[j++];
      if (s.substr(j, 2) != "%}") continue;
      // The raw text is lexed like data before a tag (raw blocks use the same lstrip rule).
      std::string_view text = StripBeforeTag(s.substr(start, i - start), sign, true, starting);
      if (!text.empty()) Emit(Tok::kData, std::string(text), start);
      return AfterEnd(s, j + 2, end_sign, true, line_starting);
    }
    Error(body, "missing {% endraw %} for this raw block");
  }

  size_t LexTag(std::string_view s, size_t tag, size_t body, bool block, bool* line_starting) {
    Emit(block ? Tok::kBlockBegin : Tok::kVarBegin, "", tag);
    std::vector<char> balance;
    size_t i = body;
    while (true) {
      i = SkipSpaces(s, i);
      if (i >= s.size()) Error(tag, block ? "missing end of block tag '%}'" : "missing '}}'");
      if (balance.empty()) {
        std::string_view end = block ? "%}" : "}}";
        if (s.substr(i, 3) == fmt::format("-{}", end)) {
          Emit(block ? Tok::kBlockEnd : Tok::kVarEnd, "", i);
          return AfterEnd(s, i + 3, '-', block, line_starting);
        }
        if (block && s.substr(i, 3) == "+%}") {
          Emit(Tok::kBlockEnd, "", i);
          return AfterEnd(s, i + 3, '+', block, line_starting);
        }
        if (s.substr(i, 2) == end) {
          Emit(block ? Tok::kBlockEnd : Tok::kVarEnd, "", i);
          return AfterEnd(s, i + 2, 0, block, line_starting);
        }
      }
      i = LexToken(s, i, &balance);
    }
  }

  size_t LexToken(std::string_view s, size_t i, std::vector<char>* balance) {
    auto c = static_cast<unsigned char>(s[i]);
    if (std::isdigit(c)) return LexNumber(s, i);
    if (std::isalpha(c) || c == '_' || c >= 0x80) {
      size_t j = i;
      while (j < s.size()) {
        auto d = static_cast<unsigned char>(s[j]);
        if (!(std::isalnum(d) || d == '_' || d >= 0x80)) break;
        ++j;
      }
      Emit(Tok::kName, std::string(s.substr(i, j - i)), i);
      return j;
    }
    if (c == '\'' || c == '"') return LexString(s, i);
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (auto op : kTwo) {
      if (s.substr(i, 2) == op) {
        Emit(Tok::kOp, std::string(op), i);
        return i + 2;
      }
    }
    if (std::string_view("+-/*%~[](){}<>=.:|,;").find(static_cast<char>(c)) ==
        std::string_view::npos) {
      Error(i, fmt::format("unexpected character '{}'", static_cast<char>(c)));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance->empty()) Error(i, fmt::format("unexpected '{}'", static_cast<char>(c)));
      if (balance->back() != static_cast<char>(c)) {
        Error(i,
              fmt::format("unexpected '{}', expected '{}'", static_cast<char>(c), balance->back()));
      }
      balance->pop_back();
    }
    Emit(Tok::kOp, std::string(1, static_cast<char>(c)), i);
    return i + 1;
  }

  size_t LexNumber(std::string_view s, size_t i) {
    auto digits = [&](size_t j, auto pred) {  // (_?digit)+ run
      while (j < s.size()) {
        if (pred(s[j])) {
          ++j;
        } else if (s[j] == '_' && j + 1 < s.size() && pred(s[j + 1])) {
          j += 2;
        } else {
          break;
        }
      }
      return j;
    };
    auto dec = [](char ch) { return ch >= '0' && ch <= '9'; };
    size_t j = digits(i, dec);
    // Float: digits (.digits)? e[+-]digits, or digits .digits
    size_t k = j;
    bool is_float = false;
    if (k + 1 < s.size() && s[k] == '.' && dec(s[k + 1])) {
      k = digits(k + 1, dec);
      is_float = true;
    }
    if (k < s.size() && (s[k] == 'e' || s[k] == 'E')) {
      size_t e = k + 1;
      if (e < s.size() && (s[e] == '+' || s[e] == '-')) ++e;
      if (e < s.size() && dec(s[e])) {
        k = digits(e, dec);
        is_float = true;
      }
    }
    Token t;
    t.pos = i;
    if (is_float) {
      std::string clean;
      for (size_t p = i; p < k; ++p) {
        if (s[p] != '_') clean.push_back(s[p]);
      }
      t.type = Tok::kFloat;
      t.number = std::strtod(clean.c_str(), nullptr);
      tokens_.push_back(std::move(t));
      return k;
    }
    int base = 10;
    size_t start = i;
    if (s[i] == '0' && i + 1 < s.size()) {
      char p = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i + 1])));
      base = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 10;
    }
    if (base != 10) {
      start = i + 2;
      auto pred = [base](char ch) {
        int v = std::isdigit(static_cast<unsigned char>(ch))    ? ch - '0'
                : std::isxdigit(static_cast<unsigned char>(ch)) ? std::tolower(ch) - 'a' + 10
                                                                : 99;
        return v < base;
      };
      // Python allows one '_' right after the prefix too.
      size_t first = start < s.size() && s[start] == '_' ? start + 1 : start;
      j = first < s.size() && pred(s[first]) ? digits(first, pred) : start;
      if (j == start) Error(i, "invalid integer literal");
    } else if (s[i] == '0') {
      j = digits(i, [](char ch) { return ch == '0'; });
    }
    std::string clean;
    for (size_t p = start; p < j; ++p) {
      if (s[p] != '_') clean.push_back(s[p]);
    }
    errno = 0;
    long long v = std::strtoll(clean.c_str(), nullptr, base);
    if (errno == ERANGE) Error(i, "integer literal does not fit in 64 bits");
    t.type = Tok::kInt;
    t.number = static_cast<int64_t>(v);
    tokens_.push_back(std::move(t));
    return j;
  }

  // Python 'unicode-escape' decoding of a string literal body.
  size_t LexString(std::string_view s, size_t i) {
    char quote = s[i];
    std::string out;
    size_t j = i + 1;
    while (true) {
      if (j >= s.size()) Error(i, "unterminated string literal");
      char c = s[j];
      if (c == quote) break;
      if (c != '\\') {
        out.push_back(c);
        ++j;
        continue;
      }
      if (j + 1 >= s.size()) Error(i, "unterminated string literal");
      char e = s[j + 1];
      j += 2;
      auto hex = [&](int n) -> char32_t {
        if (j + n > s.size()) Error(j, "truncated \\x/\\u escape in string literal");
        char32_t v = 0;
        for (int k = 0; k < n; ++k) {
          auto h = static_cast<unsigned char>(s[j + k]);
          if (!std::isxdigit(h)) Error(j, "truncated \\x/\\u escape in string literal");
          v = v * 16 + (std::isdigit(h) ? h - '0' : std::tolower(h) - 'a' + 10);
        }
        j += n;
        return v;
      };
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
          AppendUtf8(out, hex(2));
          break;
        case 'u':
          AppendUtf8(out, hex(4));
          break;
        case 'U': {
          char32_t v = hex(8);
          if (v > 0x10FFFF) Error(j, "\\U escape out of range");
          AppendUtf8(out, v);
          break;
        }
        case 'N':
          Error(j, "\\N{...} escapes are not supported; write the character itself");
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = e - '0';
            for (int k = 0; k < 2 && j < s.size() && s[j] >= '0' && s[j] <= '7'; ++k, ++j) {
              v = v * 8 + (s[j] - '0');
            }
            AppendUtf8(out, v);
          } else {
            out.push_back('\\');  // unknown escapes stay as written, like Python
            out.push_back(e);
          }
      }
    }
    Emit(Tok::kString, std::move(out), i);
    return j + 1;
  }

  std::string src_;
  std::unique_ptr<SourceMap> map_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> Lex(std::string_view source, std::unique_ptr<SourceMap>* map) {
  Lexer lexer(source);
  std::vector<Token> tokens = lexer.Run();
  *map = lexer.TakeMap();
  return tokens;
}

}  // namespace crossword::chat::jinja
