// Anthropic's Messages API, the request side: a Messages body translated into the equivalent
// chat-completions body (MessagesToChat, declared in anthropic.h), which the chat parser then
// validates. Needs only the field helpers of api.h (no engine): the request fuzzer links it.
#include <limits>
#include <string>
#include <vector>

#include "server/anthropic.h"
#include "server/api.h"

namespace crossword::server {

using json = nlohmann::ordered_json;

namespace {

// A content field (string or blocks) as the text of its text blocks; other block types are left
// to the caller (`other` sees them in order).
template <typename Other>
std::string Blocks(const json& content, const std::string& param, Other other) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) WrongType(param, "a string or an array of content blocks", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string pb = param + "[" + std::to_string(i) + "]";
    const json& b = Object(content[i], pb);
    const json* type = Field(b, "type");
    if (!type) BadRequest(pb + ".type", "'" + pb + ".type' is required");
    const std::string& t = String(*type, pb + ".type");
    if (t == "text") {
      const json* tx = Field(b, "text");
      if (!tx) BadRequest(pb + ".text", "'" + pb + ".text' is required");
      text += String(*tx, pb + ".text");
    } else if (!other(t, b, pb)) {
      BadRequest(pb + ".type", "content block type '" + t + "' is not supported here");
    }
  }
  return text;
}

std::string PlainText(const json& content, const std::string& param) {
  return Blocks(content, param,
                [](const std::string&, const json&, const std::string&) { return false; });
}

json ConvertMessages(const json& body, json& out) {
  if (const json* sys = Field(body, "system")) {
    out.push_back({{"role", "system"}, {"content", PlainText(*sys, "system")}});
  }
  const json* messages = Field(body, "messages");
  if (!messages) BadRequest("messages", "'messages' is required");
  if (!messages->is_array()) WrongType("messages", "an array of messages", *messages);
  if (messages->empty()) BadRequest("messages", "'messages' must contain at least one message");
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string pm = "messages[" + std::to_string(i) + "]";
    const json& m = Object((*messages)[i], pm);
    const json* role = Field(m, "role");
    if (!role) BadRequest(pm + ".role", "'" + pm + ".role' is required");
    const std::string& r = String(*role, pm + ".role");
    if (r != "user" && r != "assistant") {
      BadRequest(pm + ".role", "unknown role '" + r + "' (user or assistant)");
    }
    const json* content = Field(m, "content");
    if (!content) BadRequest(pm + ".content", "'" + pm + ".content' is required");
    if (r == "user") {
      // Tool results become tool messages, before the user's own text (Anthropic puts them
      // first in the turn).
      std::vector<json> results;
      const std::string text =
          Blocks(*content, pm + ".content",
                 [&](const std::string& t, const json& b, const std::string& pb) {
                   if (t != "tool_result") return false;
                   const json* id = Field(b, "tool_use_id");
                   if (!id) BadRequest(pb + ".tool_use_id", "'" + pb + ".tool_use_id' is required");
                   std::string res;
                   if (const json* c = Field(b, "content")) res = PlainText(*c, pb + ".content");
                   if (const json* e = Field(b, "is_error"); e && Bool(*e, pb + ".is_error")) {
                     res = "Error: " + res;
                   }
                   results.push_back({{"role", "tool"},
                                      {"tool_call_id", String(*id, pb + ".tool_use_id")},
                                      {"content", res}});
                   return true;
                 });
      for (auto& t : results) out.push_back(std::move(t));
      if (!text.empty() || results.empty()) out.push_back({{"role", "user"}, {"content", text}});
      continue;
    }
    json msg = {{"role", "assistant"}};
    std::string reasoning;
    json calls = json::array();
    const std::string text = Blocks(
        *content, pm + ".content", [&](const std::string& t, const json& b, const std::string& pb) {
          if (t == "thinking") {
            if (const json* th = Field(b, "thinking")) reasoning += String(*th, pb + ".thinking");
            return true;
          }
          if (t == "redacted_thinking") return true;  // opaque to this server: dropped
          if (t != "tool_use") return false;
          const json* name = Field(b, "name");
          if (!name) BadRequest(pb + ".name", "'" + pb + ".name' is required");
          json input = json::object();
          if (const json* in = Field(b, "input")) input = Object(*in, pb + ".input");
          json call = {{"type", "function"},
                       {"function", {{"name", String(*name, pb + ".name")}, {"arguments", input}}}};
          if (const json* id = Field(b, "id")) call["id"] = String(*id, pb + ".id");
          calls.push_back(std::move(call));
          return true;
        });
    msg["content"] = text;
    if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
    if (!calls.empty()) msg["tool_calls"] = calls;
    out.push_back(std::move(msg));
  }
  return out;
}

json ConvertTools(const json& tools) {
  if (!tools.is_array()) WrongType("tools", "an array of tools", tools);
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string pt = "tools[" + std::to_string(i) + "]";
    const json& t = Object(tools[i], pt);
    if (const json* type = Field(t, "type"); type && String(*type, pt + ".type") != "custom") {
      BadRequest(pt + ".type", "server tools ('" + type->get<std::string>() +
                                   "') are not available here; give client tools with "
                                   "input_schema");
    }
    const json* name = Field(t, "name");
    if (!name || String(*name, pt + ".name").empty())
      BadRequest(pt + ".name", "every tool needs a non-empty name");
    json fn = {{"name", *name}};
    if (const json* d = Field(t, "description"))
      fn["description"] = String(*d, pt + ".description");
    const json* schema = Field(t, "input_schema");
    if (!schema) BadRequest(pt + ".input_schema", "'" + pt + ".input_schema' is required");
    fn["parameters"] = Object(*schema, pt + ".input_schema");
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  return out;
}

}  // namespace

nlohmann::ordered_json MessagesToChat(const nlohmann::ordered_json& body, bool count_only) {
  json chat = json::object();
  json messages = json::array();
  ConvertMessages(body, messages);
  chat["messages"] = std::move(messages);
  if (const json* v = Field(body, "model")) String(*v, "model");
  if (!count_only) {
    const json* mt = Field(body, "max_tokens");
    if (!mt) BadRequest("max_tokens", "'max_tokens' is required");
    chat["max_tokens"] = Integer(*mt, "max_tokens", 1, std::numeric_limits<int32_t>::max());
  }
  if (const json* v = Field(body, "temperature"))
    chat["temperature"] = Number(*v, "temperature", 0, 1);
  for (const char* f : {"top_p", "top_k", "stream", "crossword", "stream_options"}) {
    if (const json* v = Field(body, f)) chat[f] = *v;
  }
  if (const json* v = Field(body, "stop_sequences")) {
    if (!v->is_array()) WrongType("stop_sequences", "an array of strings", *v);
    chat["stop"] = *v;
  }
  if (const json* v = Field(body, "metadata")) Object(*v, "metadata");
  if (const json* v = Field(body, "tools")) chat["tools"] = ConvertTools(*v);
  if (const json* v = Field(body, "tool_choice")) {
    const json& tc = Object(*v, "tool_choice");
    const json* type = Field(tc, "type");
    if (!type) BadRequest("tool_choice.type", "'tool_choice.type' is required");
    const std::string& t = String(*type, "tool_choice.type");
    if (t == "auto" || t == "none") {
      chat["tool_choice"] = t;
    } else if (t == "any") {
      chat["tool_choice"] = "required";
    } else if (t == "tool") {
      const json* name = Field(tc, "name");
      if (!name) BadRequest("tool_choice.name", "tool_choice type \"tool\" needs 'name'");
      chat["tool_choice"] = {{"type", "function"},
                             {"function", {{"name", String(*name, "tool_choice.name")}}}};
    } else {
      BadRequest(
          "tool_choice.type",
          "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\" (got \"" + t + "\")");
    }
    if (const json* d = Field(tc, "disable_parallel_tool_use")) {
      chat["parallel_tool_calls"] = !Bool(*d, "tool_choice.disable_parallel_tool_use");
    }
  }
  // Thinking is off unless asked for (Anthropic's default), whatever the template's default.
  bool thinking = false;
  if (const json* v = Field(body, "thinking")) {
    const json& th = Object(*v, "thinking");
    const json* type = Field(th, "type");
    if (!type) BadRequest("thinking.type", "'thinking.type' is required");
    const std::string& t = String(*type, "thinking.type");
    if (t == "enabled") {
      thinking = true;
      if (const json* b = Field(th, "budget_tokens"))
        Integer(*b, "thinking.budget_tokens", 1, std::numeric_limits<int32_t>::max());
    } else if (t != "disabled") {
      BadRequest("thinking.type",
                 "'thinking.type' must be \"enabled\" or \"disabled\" (got \"" + t + "\")");
    }
  }
  chat["chat_template_kwargs"] = {{"enable_thinking", thinking}};
  chat["reasoning_format"] = "deepseek";
  return chat;
}

}  // namespace crossword::server
