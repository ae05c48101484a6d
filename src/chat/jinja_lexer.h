// Jinja2 lexer: template source -> tokens, with Jinja2 3.x whitespace handling under
// trim_blocks and lstrip_blocks (jinja2/lexer.py rules). Internal to the chat library.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_value.h"

namespace crossword::chat::jinja {

enum class Tok {
  kData,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof
};

/// One token. Positions are byte offsets into the normalized source (see SourceMap).
struct Token {
  Tok type;
  std::string text;  ///< data text, name, unescaped string literal, operator
  Value number;      ///< kInt / kFloat
  size_t pos = 0;
};

/// Maps byte offsets of the normalized source to 1-based line/column for error messages.
class SourceMap {
 public:
  explicit SourceMap(const std::string& source);
  void Location(size_t pos, int* line, int* column) const;
  /// Throws TemplateError "chat template syntax error at line L, column C: message".
  [[noreturn]] void Error(size_t pos, const std::string& message) const;

 private:
  std::vector<size_t> line_starts_;
};

/// Tokenizes `source` (line breaks normalized to \n, one trailing newline dropped, as Jinja2
/// does). `map` receives the positions; throws TemplateError on lexical errors.
std::vector<Token> Lex(std::string_view source, std::unique_ptr<SourceMap>* map);

}  // namespace crossword::chat::jinja
