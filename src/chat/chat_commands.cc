// `crossword template -m MODEL --messages FILE.json [--tools FILE.json] [--no-think]`: prints the
// rendered prompt exactly (no trailing newline added).
#include "chat/chat_commands.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "base/json_gate.h"
#include "chat/template.h"
#include "gguf/gguf.h"

namespace crossword::chat {
namespace {

using Json = nlohmann::ordered_json;

std::string ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  Check(in.good(), "cannot read {} file '{}'", what, path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Json ReadJson(const std::string& path, const char* what) {
  std::string text = ReadFile(path, what);
  if (auto e = JsonLimitError(text)) Fail("{} file '{}' is {}", what, path, *e);
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  Check(!j.is_discarded(), "{} file '{}' is not valid JSON", what, path);
  return j;
}

// The text of token `key` (an id) in the GGUF vocabulary, or "" when absent.
std::string SpecialToken(const gguf::File& file, std::string_view key) {
  std::optional<uint64_t> id = file.GetUint(key);
  const gguf::Value* tokens = file.Find("tokenizer.ggml.tokens");
  if (!id || !tokens) return "";
  auto strings = tokens->StringArray();
  if (!strings || *id >= strings->size()) return "";
  return std::string((*strings)[*id]);
}

// Tool-call arguments sent as JSON text (OpenAI's shape) become objects, as the server does
// before rendering (templates iterate over arguments.items()); bad JSON is an error naming the
// call.
void ParseToolCallArguments(Json& messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    Json& m = messages[i];
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
      Json& call = m["tool_calls"][k];
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
        continue;
      Json& fn = call["function"];
      if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
      const std::string text = fn["arguments"].get<std::string>();
      const std::string where = fmt::format("messages[{}].tool_calls[{}].function.arguments", i, k);
      if (auto e = JsonLimitError(text)) Fail("{} (JSON text) is {}", where, *e);
      Json args = text.empty() ? Json::object() : Json::parse(text, nullptr, false);
      Check(args.is_object(), "{} must be a JSON object or its JSON text (got '{}')", where, text);
      fn["arguments"] = std::move(args);
    }
  }
}

}  // namespace

std::string RenderTemplateCommand(const TemplateCommandOptions& o) {
  std::string source, bos, eos;
  if (!o.template_path.empty()) {
    source = ReadFile(o.template_path, "template");
  }
  const bool use_default = o.model_path.empty() && source.empty() && !o.default_model.empty();
  if (!o.model_path.empty() || use_default) {
    gguf::File file =
        use_default ? gguf::File::Parse(o.default_model) : gguf::File::Open(o.model_path);
    if (source.empty()) {
      std::optional<std::string_view> tpl = file.GetString("tokenizer.chat_template");
      Check(tpl.has_value(),
            "model '{}' has no tokenizer.chat_template; pass --template FILE.jinja instead",
            o.model_path);
      source = std::string(*tpl);
    }
    bos = SpecialToken(file, "tokenizer.ggml.bos_token_id");
    eos = SpecialToken(file, "tokenizer.ggml.eos_token_id");
  }
  Check(!source.empty(), "no chat template: give -m MODEL.gguf or --template FILE.jinja");
  Json input = ReadJson(o.messages_path, "messages");
  Json messages = input, tools, kwargs = Json::object();
  if (input.is_object()) {
    Check(input.contains("messages"),
          "messages file '{}' is an object without \"messages\"; expected a messages array or a "
          "chat request",
          o.messages_path);
    messages = input["messages"];
    if (input.contains("tools")) tools = input["tools"];
    if (input.contains("chat_template_kwargs") && input["chat_template_kwargs"].is_object()) {
      kwargs = input["chat_template_kwargs"];
    }
  }
  Check(messages.is_array(), "messages in '{}' must be a JSON array, got {}", o.messages_path,
        messages.type_name());
  ParseToolCallArguments(messages);
  if (!o.tools_path.empty()) tools = ReadJson(o.tools_path, "tools");
  if (o.no_think) kwargs["enable_thinking"] = false;
  Template tpl = Template::Parse(source);
  return tpl.Render(MakeChatContext(messages, tools, o.add_generation_prompt, bos, eos, kwargs));
}

void RegisterChatCommands(CLI::App& app, std::span<const std::byte> default_model) {
  auto opts = std::make_shared<TemplateCommandOptions>();
  opts->default_model = default_model;
  CLI::App* cmd = app.add_subcommand(
      "template", "render the chat template for a conversation (prints the exact prompt)");
  cmd->add_option("-m,--model", opts->model_path,
                  "GGUF model (uses tokenizer.chat_template; default: the embedded model)");
  cmd->add_option("--template", opts->template_path, "Jinja template file instead of the model's");
  cmd->add_option("--messages", opts->messages_path,
                  "JSON file: messages array, or a chat request with messages/tools")
      ->required();
  cmd->add_option("--tools", opts->tools_path, "JSON file with the tools array");
  cmd->add_flag("--no-think", opts->no_think, "Render with enable_thinking=false");
  cmd->add_flag("!--no-generation-prompt", opts->add_generation_prompt,
                "Do not append the assistant generation prompt");
  cmd->callback([opts]() {
    std::string prompt = RenderTemplateCommand(*opts);
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  });
}

}  // namespace crossword::chat
