// libFuzzer target for the server's request path, model stubbed at the engine boundary: a request
// body -> the JSON depth/size gate and parser (server::ParseBody) -> request validation
// (ParseChatRequest / ParseCompletionRequest, schemas and grammars compiled) -> the chat template
// rendered over the validated messages, tools and kwargs -> in place of the model, the body's
// own text as the answer through the output parser (reasoning, tool calls, argument JSON). Any
// input must end in a response or a clear error (ApiError, TemplateException, crossword::Error):
// never a crash, a sanitizer report, a leak or another exception.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "base/error.h"
#include "chat/output_parser.h"
#include "chat/template.h"
#include "server/api.h"

namespace {

using crossword::chat::Template;
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

crossword::server::RequestDefaults Defaults() {
  crossword::server::RequestDefaults d;
  d.n_vocab = 1024;
  d.params.eog_ids = {1, 2};
  d.params.mask_id = 3;
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace crossword;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const Template& tpl = ClovTemplate();
  size_t sink = 0;
  try {
    const Json j = server::ParseBody(body);
    const server::RequestDefaults defaults = Defaults();
    if (j.contains("prompt")) {
      const server::CompletionRequest r = server::ParseCompletionRequest(j, defaults);
      sink += r.prompt.size() + r.prompt_tokens.size() + r.grammar.size();
      return 0;
    }
    const server::ChatRequest r = server::ParseChatRequest(j, defaults);
    const std::string prompt =
        tpl.Render(chat::MakeChatContext(r.messages, r.tools, true, "", "<|im_end|>", r.kwargs));
    sink += prompt.size();
    // The stubbed model "answers" with the body text: the output parser sees hostile markup.
    chat::ParseOptions po;
    po.thinking_opened = chat::PromptOpensThinking(prompt);
    po.tools = r.tools;
    const chat::ParsedOutput out = chat::ParseOutput(body, po);
    sink += out.content.size() + out.reasoning.size();
    for (const auto& call : out.tool_calls) sink += call.ArgumentsJson().size();
  } catch (const server::ApiError& e) {
    sink += e.status();
  } catch (const chat::TemplateException& e) {
    sink += std::string_view(e.what()).size();
  } catch (const Error& e) {
    sink += std::string_view(e.what()).size();
  }
  if (sink == 1) return 0;  // keep the work observable
  return 0;
}
