// Chat templates: a Jinja2 interpreter that renders `tokenizer.chat_template` the way Hugging Face
// transformers does (sandboxed Jinja2 with trim_blocks, lstrip_blocks, loop controls, HF tojson
// and raise_exception). Compile once with Template::Parse, render per request.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/error.h"
#include "chat/jinja_value.h"

namespace crossword::chat {

/// A template that cannot be parsed, or that failed while rendering (type errors, undefined
/// attributes, limits exceeded). The message names the template line (and column for syntax
/// errors). For a server this is a template or input problem: answer HTTP 400 or 500 by context.
class TemplateError : public crossword::Error {
 public:
  using crossword::Error::Error;
};

/// The template itself rejected the input via `raise_exception("...")` (e.g. "No user query found
/// in messages."). `what()` is exactly the template's message, suitable for an HTTP 400 body.
class TemplateException : public crossword::Error {
 public:
  using crossword::Error::Error;
};

/// Limits applied while rendering; defaults suit chat templates (see jinja::RenderLimits).
using RenderLimits = jinja::RenderLimits;

/// A compiled Jinja2 template. Immutable after Parse; Render is const and thread-safe.
class Template {
 public:
  /// Compiles `source`. Throws TemplateError ("line L, column C: ...") on a syntax error or on
  /// Jinja2 features chat templates do not use (include/import/extends/block, call blocks,
  /// recursive loops).
  static Template Parse(std::string_view source);

  /// Renders with `context` as the template variables: `messages`, `tools`,
  /// `add_generation_prompt`, `bos_token`, `eos_token` and any chat_template_kwargs (e.g.
  /// `enable_thinking`). Globals: raise_exception, strftime_now, range, namespace, dict, cycler,
  /// joiner. Throws TemplateException for raise_exception, TemplateError for everything else
  /// (including `context` not being an object and exceeded `limits`).
  std::string Render(const nlohmann::ordered_json& context,
                     const RenderLimits& limits = RenderLimits()) const;

  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;
  ~Template();

 private:
  struct Impl;
  explicit Template(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Convenience: the chat_template_kwargs-style context for a conversation. Copies `messages`,
/// `tools` (omitted when null or empty), sets add_generation_prompt, bos/eos tokens and merges
/// `kwargs` (an object, e.g. {"enable_thinking": false}) on top.
nlohmann::ordered_json MakeChatContext(const nlohmann::ordered_json& messages,
                                       const nlohmann::ordered_json& tools,
                                       bool add_generation_prompt, std::string_view bos_token,
                                       std::string_view eos_token,
                                       const nlohmann::ordered_json& kwargs);

}  // namespace crossword::chat
