// The fuzzers' request path; see request_path.h.
#include "request_path.h"

#include <fstream>
#include <sstream>
#include <string>

#include "base/error.h"
#include "chat/output_parser.h"
#include "chat/template.h"
#include "server/anthropic.h"
#include "server/api.h"
#include "server/responses.h"

namespace crossword::fuzz {

namespace {

using chat::Template;
using Json = nlohmann::ordered_json;

// The embedded model's template (assets/chat_template.jinja), parsed once.
const Template& ClovTemplate() {
  static const Template tpl = [] {
    std::ifstream in(std::string(CROSSWORD_SOURCE_DIR) + "/assets/chat_template.jinja");
    std::stringstream ss;
    ss << in.rdbuf();
    return Template::Parse(ss.str());
  }();
  return tpl;
}

server::RequestDefaults Defaults() {
  server::RequestDefaults d;
  d.n_vocab = 1024;
  d.params.eog_ids = {1, 2};
  d.params.mask_id = 3;
  return d;
}

// A validated chat request: the prompt rendered, then (unless only counting) the body text as
// the model's answer through the output parser, which sees hostile markup.
size_t RunChat(const Json& chat_body, std::string_view answer, bool count_only) {
  const server::ChatRequest r = server::ParseChatRequest(chat_body, Defaults());
  const std::string prompt = ClovTemplate().Render(
      chat::MakeChatContext(r.messages, r.tools, true, "", "<|im_end|>", r.kwargs));
  size_t sink = prompt.size();
  if (count_only) return sink;
  chat::ParseOptions po;
  po.thinking_opened = chat::PromptOpensThinking(prompt);
  po.tools = r.tools;
  const chat::ParsedOutput out = chat::ParseOutput(answer, po);
  sink += out.content.size() + out.reasoning.size();
  for (const auto& call : out.tool_calls) sink += call.ArgumentsJson().size();
  return sink;
}

}  // namespace

size_t RunRequestPath(Api api, std::string_view body) {
  size_t sink = 0;
  try {
    const Json j = server::ParseBody(body);
    if (api == Api::kOpenAi) api = j.contains("prompt") ? Api::kCompletion : Api::kChat;
    switch (api) {
      case Api::kCompletion: {
        const server::CompletionRequest r = server::ParseCompletionRequest(j, Defaults());
        sink += r.prompt.size() + r.prompt_tokens.size() + r.grammar.size();
        break;
      }
      case Api::kMessages:
      case Api::kCountTokens:
        sink += RunChat(server::MessagesToChat(j, api == Api::kCountTokens), body,
                        api == Api::kCountTokens);
        break;
      case Api::kResponses:
        sink += server::ResponsesEchoOf(j).fields.size();
        sink += RunChat(server::ResponsesToChat(j), body, false);
        break;
      case Api::kOpenAi:
      case Api::kChat:
        sink += RunChat(j, body, false);
        break;
    }
  } catch (const server::ApiError& e) {
    sink += static_cast<size_t>(e.status());
  } catch (const chat::TemplateException& e) {
    sink += std::string_view(e.what()).size();
  } catch (const Error& e) {
    sink += std::string_view(e.what()).size();
  }
  return sink;
}

}  // namespace crossword::fuzz
