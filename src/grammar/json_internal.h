// Shared pieces of the JSON Schema compiler (json_schema.cc, json_merge.cc, json_values.cc,
// regex.cc). Not part of the library's interface.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>

#include "grammar/grammar.h"

namespace crossword::grammar::json_internal {

using Json = nlohmann::ordered_json;

/// The GBNF rules being generated: bodies by name, names unique.
class Rules {
 public:
  /// Every name (the root's too) starts with `prefix`, so that grammars can be combined.
  explicit Rules(std::string prefix = "") : prefix_(std::move(prefix)) {}
  /// The full name of the shared helper `name` (as Shared returns it).
  std::string Name(const std::string& name) const { return prefix_ + name; }
  /// Adds a rule named after `hint` (made unique) and returns its name.
  std::string Add(std::string_view hint, std::string body);
  /// Defines `name` once (a shared helper such as `char`); returns the name.
  std::string Shared(const std::string& name, const std::string& body);
  /// Reserves a unique name to define later with Define (for recursion).
  std::string Reserve(std::string_view hint);
  void Define(const std::string& name, std::string body);
  size_t bytes() const { return bytes_; }
  /// The grammar: `<prefix>root ::= root_body` and every rule.
  std::string Text(const std::string& root_body) const;

 private:
  std::string prefix_;
  std::map<std::string, std::string> rules_;
  std::unordered_map<std::string, int> counters_;
  size_t bytes_ = 0;
};

/// An expression matching nothing (an empty character class).
inline constexpr std::string_view kNothing = "[^\\x00-\\U0010FFFF]";

/// "..." for a byte string (valid UTF-8), escaped for GBNF.
std::string GbnfLiteral(std::string_view bytes);
/// A character for use inside a GBNF class ([...]).
std::string GbnfClassChar(char32_t cp);

/// The canonical-JSON string character: a raw code point other than `"`, `\` and controls, or
/// one of the escapes JSON.stringify writes. Defined once in `rules`; returns the rule name.
/// With `raw`: any character but `<`, unescaped (JsonSchemaOptions::raw_string).
std::string CharRule(Rules& rules, bool raw = false);
/// A JSON string body for code points in `ranges` (inclusive), each written canonically:
/// raw where allowed, else its canonical escape. Returns a GBNF expression for one character.
/// With `raw`: the code points themselves, without `<`.
std::string CodepointSetGbnf(const std::vector<std::pair<char32_t, char32_t>>& ranges,
                             bool raw = false);

/// Numbers (fixed notation when bounded). Bounds are JSON numbers or null (absent).
std::string NumberGbnf(const Json& minimum, bool min_exclusive, const Json& maximum,
                       bool max_exclusive, bool integer, Rules& rules);

/// A string format's content (between the quotes), or "" when the format is not supported.
std::string FormatGbnf(std::string_view format, bool raw = false);

/// An ECMA-262 `pattern` (the supported subset, docs/structured-output.md) as the content of a
/// JSON string (between the quotes). Unanchored sides match any characters, as JSON Schema's
/// search semantics require. Throws GrammarError (kSyntax, kUnsupported) naming `where`.
std::string RegexGbnf(std::string_view pattern, std::string_view where, Rules& rules,
                      bool raw = false);

}  // namespace crossword::grammar::json_internal
