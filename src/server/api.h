// OpenAI request parsing and validation for `crossword serve`: JSON bodies of /v1/chat/completions
// and /v1/completions become typed requests, or an ApiError that maps to OpenAI's error JSON.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "decode/generation.h"

namespace crossword::server {

/// An error answered as HTTP `status` with `{"error": {"message", "type", "param", "code"}}`.
/// `type` follows OpenAI: invalid_request_error (400/401/404/413), server_error (500),
/// unavailable_error (503). `param` names the offending request field ("" = null).
class ApiError : public Error {
 public:
  ApiError(int status, std::string type, std::string param, const std::string& message,
           std::string code = "")
      : Error(message),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)),
        code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string type_, param_, code_;
};

/// A 400 invalid_request_error about `param`.
[[noreturn]] void BadRequest(const std::string& param, const std::string& message);

/// Which API's error body a route answers with.
enum class ErrorShape : uint8_t {
  kOpenAi,     ///< {"error": {"message", "type", "param", "code"}}
  kAnthropic,  ///< {"type": "error", "error": {"type", "message"}}, type from the status
};

/// The error body for `e` in `shape` (OpenAI's by default).
nlohmann::ordered_json ErrorJson(const ApiError& e, ErrorShape shape = ErrorShape::kOpenAi);

/// Parses a request body: must be a JSON object in UTF-8. Malformed JSON, truncated bodies,
/// invalid UTF-8 and lone surrogates (\ud800 escapes without their pair) are a 400, and so is a
/// body beyond JsonLimits (base/json_gate.h: nesting over 256 levels, over 1,000,000 members),
/// checked before parsing. Every route taking a JSON body parses it here.
nlohmann::ordered_json ParseBody(std::string_view body);

// Field helpers for request parsers (every API's): each throws ApiError(400) naming `param`.

/// The field's value, or nullptr when absent or JSON null (OpenAI treats null as absent).
const nlohmann::ordered_json* Field(const nlohmann::ordered_json& obj, const char* name);
/// "a string", "an integer", ... (for messages).
std::string TypeName(const nlohmann::ordered_json& v);
/// 400: "'param' must be WANT (got TYPE)".
[[noreturn]] void WrongType(const std::string& param, const char* want,
                            const nlohmann::ordered_json& v);
/// A finite number in [lo, hi].
double Number(const nlohmann::ordered_json& v, const std::string& param, double lo, double hi);
/// A number in (0, 1] that stays above 0 as a float (1e-300 would round to 0 and reach decoding's
/// own checks as a 500): probabilities and thresholds. One message for both ends of the range.
float UnitFraction(const nlohmann::ordered_json& v, const std::string& param);
/// An integer in [lo, hi].
int64_t Integer(const nlohmann::ordered_json& v, const std::string& param, int64_t lo, int64_t hi);
bool Bool(const nlohmann::ordered_json& v, const std::string& param);
const std::string& String(const nlohmann::ordered_json& v, const std::string& param);
const nlohmann::ordered_json& Object(const nlohmann::ordered_json& v, const std::string& param);
/// A message's content as one string: a string as it is, or an array of parts whose types are in
/// `text_types` ("refusal" parts are read from their "refusal" field, others from "text"),
/// concatenated. 400 naming the part for any other type or a missing field.
std::string ContentText(const nlohmann::ordered_json& content, const std::string& param,
                        std::initializer_list<std::string_view> text_types = {"text"});

enum class ReasoningFormat : uint8_t { kDeepseek, kNone };
/// "deepseek" | "auto" (= deepseek) | "none"; ApiError otherwise.
ReasoningFormat ParseReasoningFormat(std::string_view name, const std::string& param);

enum class ToolChoice : uint8_t { kAuto, kNone, kRequired, kNamed };

/// Fields shared by both generation endpoints.
struct GenerationRequest {
  decode::DecodeParams params;    ///< server defaults with the request's fields applied
  bool max_tokens_given = false;  ///< else params.max_tokens is set to the context left
  std::vector<std::string> stop;  ///< stop strings (non-empty)
  bool stream = false;
  bool include_usage = false;  ///< stream_options.include_usage
  bool trace = false;  ///< stream_options.crossword_trace: per-pass block events (docs/server.md)
  bool cache_prompt = true;  ///< false: no prompt-cache reuse (llama-server's field)
  int n = 1;                 ///< choices per prompt (OpenAI `n`), [1, 128]
  int logprobs = -1;         ///< -1: off; else alternatives per token (chat top_logprobs,
                             ///< completions logprobs); AR mode only
  /// Structured output asked for (response_format json_object / json_schema, llama-server's
  /// `json_schema` or `grammar`) as GBNF text; empty: none. The schema was compiled and the
  /// grammar parsed here, so a bad one is a 400 before anything runs.
  std::string grammar;
  std::string grammar_param;       ///< the field it came from, for errors
  bool grammar_generated = false;  ///< from a schema (larger size limits apply)
};

/// A validated /v1/chat/completions request.
struct ChatRequest : GenerationRequest {
  nlohmann::ordered_json messages;  ///< normalized: content is a string (text parts joined),
                                    ///< tool-call arguments are objects, "developer" -> "system"
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();    ///< OpenAI form, validated
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  ///< chat_template_kwargs
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_name;  ///< kNamed: the function to call
  bool parallel_tool_calls = true;
  ReasoningFormat reasoning_format = ReasoningFormat::kDeepseek;
  /// The prompt ends inside the final (assistant) message, which the answer continues:
  /// `continue_final_message` (vLLM), or a final assistant message without
  /// `add_generation_prompt: true` (llama-server's assistant prefill).
  bool continue_final = false;
  bool add_generation_prompt = true;  ///< false: the template's own ending, no new turn
};

/// A validated /v1/completions request: its first prompt, and any more (one choice each).
struct CompletionRequest : GenerationRequest {
  std::string prompt;                  ///< text prompt, or
  std::vector<int32_t> prompt_tokens;  ///< token ids given directly
  bool tokens_given = false;
  struct Prompt {
    std::string text;
    std::vector<int32_t> tokens;
    bool tokens_given = false;
  };
  std::vector<Prompt> more;  ///< prompts after the first (`prompt` as a list of several)
};

/// Server-side defaults a request starts from.
struct RequestDefaults {
  decode::DecodeParams params;  ///< the model's defaults with the server's --mode etc. applied
  ReasoningFormat reasoning_format = ReasoningFormat::kDeepseek;
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  ///< --chat-template-kwargs
  int64_t n_vocab = 0;                                               ///< for logit_bias ids
  int n_layer = 0;  ///< for draft_skip_ffn (0: not checked here, only when the generation starts)
  bool fixed_seed = false;  ///< --seed given: a request without "seed" uses params' seed
  int64_t n_predict = -1;   ///< -n: max_tokens of a request that gives none (-1: context left)
};

/// The fields every generation endpoint shares (max_tokens / n_predict, sampling, logit_bias,
/// stop, stream, ignore_eos, cache_prompt, logprobs, structured output, decoding mode), applied
/// over `defaults` into `r`. Throws ApiError(400) naming the field.
void ParseGenerationFields(const nlohmann::ordered_json& body, const RequestDefaults& defaults,
                           GenerationRequest& r);

/// Validates a chat completion body (see docs/server.md for every field). Throws ApiError(400)
/// naming the field on wrong types, out-of-range values, empty messages, n > 1, unsupported
/// options, a schema outside the supported subset (naming the keyword), a malformed grammar.
ChatRequest ParseChatRequest(const nlohmann::ordered_json& body, const RequestDefaults& defaults);

/// Validates a completion body (`prompt` as a string, token ids, or a list of strings or of
/// token-id lists: one prompt each). Throws ApiError(400) like ParseChatRequest.
CompletionRequest ParseCompletionRequest(const nlohmann::ordered_json& body,
                                         const RequestDefaults& defaults);

}  // namespace crossword::server
