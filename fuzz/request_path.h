// The request path the fuzzers drive, model stubbed at the engine boundary: a JSON body -> the
// depth/size gate and parser (server::ParseBody) -> the API's translation (Anthropic Messages,
// OpenAI Responses) -> request validation (ParseChatRequest / ParseCompletionRequest, schemas and
// grammars compiled) -> the chat template rendered over the validated messages, tools and kwargs
// -> in place of the model, the body's own text as the answer through the output parser.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace crossword::fuzz {

/// Which route the body was posted to.
enum class Api : uint8_t {
  kOpenAi,       ///< /v1/chat/completions, or /v1/completions when the body has "prompt"
  kChat,         ///< /v1/chat/completions, /apply-template
  kCompletion,   ///< /v1/completions
  kMessages,     ///< /v1/messages (Anthropic)
  kCountTokens,  ///< /v1/messages/count_tokens (Anthropic; max_tokens not required)
  kResponses,    ///< /v1/responses (OpenAI Responses)
};

/// Runs `body` through the route's request path. Any input must end in a result or a clear
/// error (ApiError, TemplateException, crossword::Error), which is caught here: anything else
/// (a crash, a sanitizer report, another exception) is a finding. Returns a number derived from
/// the work done (keeps it observable).
size_t RunRequestPath(Api api, std::string_view body);

}  // namespace crossword::fuzz
