// Structured output on the engine side: the grammar that keeps tool calls in Qwen's XML format
// (assets/chat_template.jinja) to the declared tools and their parameter schemas.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace crossword::engine {

/// Where a tool-call grammar starts and what it allows.
enum class ToolGrammarMode : uint8_t {
  kAuto,      ///< free text without "<tool_call>", then optionally calls (tool_choice auto)
  kRequired,  ///< only calls, at least one (tool_choice required / named)
  /// The prompt already ends with "<tool_call>\n<function=" (the server's forced opening): a
  /// declared function name, the rest of that call, then (if parallel) more calls.
  kAfterFunctionOpen,
  /// The prompt already ends with "<tool_call>\n<function=NAME>\n": that function's parameters,
  /// the end of the call, then (if parallel) more calls.
  kAfterNamedOpen,
};

/// GBNF for calls to `tools` (OpenAI form: [{"type": "function", "function": {"name",
/// "parameters"}}], validated) in the format
///   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>\n</tool_call>
/// with calls separated by "\n". Parameters follow the schema's `properties` order, required
/// ones always present, others optional, no undeclared ones. A value whose declared type is a
/// string (as the output parser types it, chat::TypeParameterValue) is plain text: its enum
/// values, or a string meeting its pattern / format / lengths (no `<`), or any text without
/// "\n</parameter>"; any other value is JSON (JSON Schema compiled with flexible whitespace,
/// the style of the template's `tojson`). `name`: the function for kAfterNamedOpen (and the
/// only one allowed in kRequired when non-empty). Throws grammar::GrammarError naming the tool
/// and parameter when a schema is outside the supported subset.
std::string ToolCallGbnf(const nlohmann::ordered_json& tools, ToolGrammarMode mode,
                         const std::string& name, bool parallel);

}  // namespace crossword::engine
