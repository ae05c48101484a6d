// JSON Schema -> GBNF. The grammar admits exactly the canonical JSON texts (CanonicalJson) of
// the instances the schema accepts, for the supported subset; anything outside the subset is
// refused with the keyword's name, never ignored. docs/structured-output.md lists the subset.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace crossword::grammar {

struct JsonSchemaOptions {
  /// kCompact: no whitespace anywhere (OpenAI strict mode's output). kFlexible: up to 20
  /// spaces, tabs or newlines after each structural character and each value (llama.cpp's
  /// json_schema_to_grammar style).
  enum class Whitespace : uint8_t { kCompact, kFlexible };
  Whitespace whitespace = Whitespace::kCompact;
  /// The dialect when the schema has no `$schema`: 4, 6, 7 (draft-04/06/07: `$ref` siblings are
  /// ignored, `items` arrays are tuples) or 2020 (2020-12: siblings apply, `prefixItems`).
  int default_draft = 2020;
  size_t max_schema_bytes = 256 * 1024;  ///< schema text
  uint32_t max_depth = 64;               ///< nesting of the schema document
  size_t max_schema_nodes = 100000;      ///< values in the schema document
  size_t max_grammar_bytes = 4 << 20;    ///< generated GBNF
  /// Prepended to every rule name, the root's too ("<prefix>root"), so that several generated
  /// grammars can live in one GBNF text.
  std::string rule_prefix;
  /// The schema describes a string written raw: no quotes, no escapes, any character but `<`
  /// (a tool-call parameter value in Qwen's XML format). Only `enum`/`const` strings, `pattern`,
  /// `format`, `minLength` and `maxLength` apply; other types are refused.
  bool raw_string = false;
};

/// The GBNF grammar (start rule `root`) of the schema text. Throws GrammarError: kTooLarge
/// (size, depth), kSyntax (the text is not JSON, or a pattern is not a regular expression of
/// the subset), kUnsupported (naming the keyword and its JSON pointer), kEmpty (no instance is
/// valid). Size and depth are checked on the raw text before it is parsed.
std::string JsonSchemaToGbnf(std::string_view schema_text, const JsonSchemaOptions& options = {});
/// The same for a parsed schema (bounded the same way, without recursion, before use).
std::string JsonSchemaToGbnf(const nlohmann::ordered_json& schema,
                             const JsonSchemaOptions& options = {});
/// GBNF for any JSON value whose top level is an object (OpenAI's json_object mode).
std::string JsonObjectGbnf(const JsonSchemaOptions& options = {});

/// The canonical text of a JSON value, the form the grammars admit: no whitespace; object keys
/// in the given order; strings with `"`, `\` and U+0000..U+001F escaped as JavaScript's
/// JSON.stringify escapes them (\b \t \n \f \r, else \u00xx) and every other character raw
/// UTF-8; numbers as JSON.stringify writes them (the shortest digits that read back exactly:
/// 1.5, 0.000001, 1e-7, 1.5e+300), except that integral values are plain digits at any
/// magnitude (1e21 -> 1000000000000000000000; JSON.stringify writes 1e+21), so that every
/// integer is written the way an integer schema's grammar admits.
std::string CanonicalJson(const nlohmann::ordered_json& value);

}  // namespace crossword::grammar
