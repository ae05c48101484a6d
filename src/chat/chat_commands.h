// `crossword template`: renders a model's chat template for a conversation file, so anyone can
// check by hand the exact prompt the engine would build.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace crossword::chat {

/// Inputs of `crossword template`.
struct TemplateCommandOptions {
  std::string model_path;  ///< GGUF whose tokenizer.chat_template (and bos/eos) is used
  /// GGUF bytes used when neither model_path nor template_path is given (the binary's embedded
  /// model); empty: one of the two is required.
  std::span<const std::byte> default_model;
  std::string template_path;  ///< optional: a .jinja file instead of the model's template
  std::string messages_path;  ///< JSON: a messages array, or a request object with "messages"
  std::string tools_path;     ///< optional JSON tools array
  bool no_think = false;      ///< enable_thinking = false
  bool add_generation_prompt = true;
};

/// Renders the prompt for `options`. A request object may also carry "tools" and
/// "chat_template_kwargs". Throws crossword::Error (unreadable or invalid files, a model
/// without tokenizer.chat_template), TemplateError or TemplateException.
std::string RenderTemplateCommand(const TemplateCommandOptions& options);

/// Registers `template` on the crossword CLI; `default_model` (GGUF bytes that outlive the app,
/// may be empty) stands in when neither -m nor --template is given.
void RegisterChatCommands(CLI::App& app, std::span<const std::byte> default_model = {});

}  // namespace crossword::chat
