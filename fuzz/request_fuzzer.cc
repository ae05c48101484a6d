// libFuzzer target for the server's JSON request path (request_path.h), model stubbed at the
// engine boundary. The first byte picks the route ((byte - '0') modulo 5; seeds use the digit):
//   '0' OpenAI (/v1/chat/completions, or /v1/completions when the body has "prompt"),
//   '1' Anthropic /v1/messages, '2' /v1/messages/count_tokens, '3' OpenAI /v1/responses,
//   '4' /v1/chat/completions whatever the body.
// The rest is the body. Any input must end in a response or a clear error (ApiError,
// TemplateException, crossword::Error): never a crash, a sanitizer report, a leak or another
// exception.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "request_path.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using crossword::fuzz::Api;
  if (size == 0) return 0;
  static constexpr Api kRoutes[] = {Api::kOpenAi, Api::kMessages, Api::kCountTokens,
                                    Api::kResponses, Api::kChat};
  const Api api = kRoutes[static_cast<uint8_t>(data[0] - '0') % 5];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  volatile size_t sink = crossword::fuzz::RunRequestPath(api, body);  // keep the work observable
  (void)sink;
  return 0;
}
