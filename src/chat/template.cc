// Public chat-template API: compile once (Template::Parse), render per request with the
// Hugging Face context variables.
#include "chat/template.h"

#include "chat/jinja_ast.h"
#include "chat/jinja_interp.h"

namespace crossword::chat {

struct Template::Impl {
  jinja::Body body;
};

Template::Template(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;
Template::~Template() = default;

Template Template::Parse(std::string_view source) {
  auto impl = std::make_unique<Impl>();
  impl->body = jinja::ParseTemplate(source);
  return Template(std::move(impl));
}

std::string Template::Render(const nlohmann::ordered_json& context,
                             const RenderLimits& limits) const {
  if (!context.is_object()) {
    throw TemplateError(
        fmt::format("chat template context must be a JSON object, got {}", context.type_name()));
  }
  jinja::Value vars;
  try {
    vars = jinja::FromJson(context);
  } catch (const TemplateError&) {
    throw;
  } catch (const crossword::Error& e) {
    throw TemplateError(e.what());
  }
  jinja::Interpreter interpreter(limits);
  return interpreter.Run(impl_->body, vars);
}

nlohmann::ordered_json MakeChatContext(const nlohmann::ordered_json& messages,
                                       const nlohmann::ordered_json& tools,
                                       bool add_generation_prompt, std::string_view bos_token,
                                       std::string_view eos_token,
                                       const nlohmann::ordered_json& kwargs) {
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = messages;
  if (!tools.is_null() && !(tools.is_array() && tools.empty())) ctx["tools"] = tools;
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = std::string(bos_token);
  ctx["eos_token"] = std::string(eos_token);
  if (kwargs.is_object()) {
    for (const auto& [k, v] : kwargs.items()) ctx[k] = v;
  }
  return ctx;
}

}  // namespace crossword::chat
