// Splits a Qwen3.5-family model's raw output into reasoning (<think>...</think>), content and XML
// tool calls
// (<tool_call><function=NAME><parameter=ARG>VALUE</parameter>...</function></tool_call>), one-shot
// (ParseOutput) or incrementally (StreamParser) without ever emitting half a tag.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace crossword::chat {

/// One parsed tool call. `arguments` is always a JSON object (parameter name -> typed value).
struct ToolCall {
  std::string name;
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
  /// `arguments` as compact JSON text (what OpenAI's `function.arguments` carries); equals the
  /// concatenation of the streamed argument deltas.
  std::string ArgumentsJson() const;
};

/// The parts of one model output.
struct ParsedOutput {
  std::string reasoning;  ///< text inside <think>...</think>, surrounding whitespace trimmed
  std::string content;    ///< text outside reasoning and tool calls, surrounding whitespace trimmed
  std::vector<ToolCall> tool_calls;
};

/// How to read the output.
struct ParseOptions {
  /// The prompt already opened the reasoning block (it ends with `<think>\n`, as our template's
  /// generation prompt does with thinking on), so the output starts inside reasoning.
  bool thinking_opened = false;
  /// Recognize <tool_call> blocks. With it off, tool-call markup stays in the content.
  bool parse_tool_calls = true;
  /// The request's tools (OpenAI form [{"type":"function","function":{"name","parameters"}}] or
  /// bare function objects); parameter values are typed by their JSON schema.
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
};

/// Whether a rendered prompt leaves a reasoning block open (its last `<think>` has no
/// `</think>` after it): the value for ParseOptions::thinking_opened.
bool PromptOpensThinking(std::string_view prompt);

/// Types one parameter value by its JSON schema the way vLLM's Qwen3-coder parser does, without
/// ever failing: "string"-like types (and unknown parameters) keep the raw text; integer types
/// take integers (and integral decimals, "140.0" -> 140); number types take numbers ("2.50" ->
/// 2.5, integral values become integers); booleans accept true/false in any case; "null"/"None"
/// become null for non-string types; objects, arrays and other declared types parse as JSON or
/// Python literals. A parameter without a declared type, or not in the schema, is a string.
/// Anything that does not fit its type stays a string. Invalid UTF-8 becomes U+FFFD.
nlohmann::ordered_json TypeParameterValue(const std::string& raw,
                                          const nlohmann::ordered_json* schema);

/// One streamed event.
struct StreamDelta {
  enum class Kind {
    kReasoning,          ///< `text` continues the reasoning
    kContent,            ///< `text` continues the content
    kToolCallStart,      ///< a tool call `index` named `name` begins
    kToolCallArguments,  ///< `text` continues tool call `index`'s arguments JSON
  };
  Kind kind;
  std::string text;
  int index = -1;
  std::string name;
};

/// Incremental parser: Feed chunks as they are decoded, then Finish. Deltas never contain part
/// of a tag (`<think>`, `</think>`, `<tool_call>`, `<function=...>`, `<parameter=...>`,
/// `</parameter>`, ...) nor a split UTF-8 character; text is held back until it is decided.
/// The concatenated deltas equal result(): reasoning, content and each call's ArgumentsJson().
class StreamParser {
 public:
  explicit StreamParser(ParseOptions options = ParseOptions());
  ~StreamParser();
  StreamParser(StreamParser&&) noexcept;
  StreamParser& operator=(StreamParser&&) noexcept;

  /// Consumes the next piece of output text; returns the deltas it decides.
  std::vector<StreamDelta> Feed(std::string_view chunk);
  /// Ends the stream: flushes held-back text (an unterminated reasoning block stays reasoning,
  /// an unterminated tool call is closed with the parameters received so far, a cut tag becomes
  /// text). Further Feed calls are errors.
  std::vector<StreamDelta> Finish();
  /// Everything parsed so far (complete after Finish).
  const ParsedOutput& result() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// One-shot parse: the same result as feeding `text` to a StreamParser and finishing.
ParsedOutput ParseOutput(std::string_view text, const ParseOptions& options);

}  // namespace crossword::chat
