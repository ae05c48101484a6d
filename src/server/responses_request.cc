// OpenAI's Responses API, the request side: a Responses body translated into the equivalent
// chat-completions body (ResponsesToChat) and the fields a response echoes (ResponsesEchoOf), both
// declared in responses.h. Needs only the field helpers of api.h (no engine): the request fuzzer
// links it.
#include <limits>
#include <string>

#include "server/api.h"
#include "server/responses.h"

namespace crossword::server {

using json = nlohmann::ordered_json;

namespace {

// A message item's content: a string or input_text / output_text / text / refusal parts.
std::string ItemText(const json& content, const std::string& param) {
  return ContentText(content, param, {"input_text", "output_text", "text", "refusal"});
}

void ConvertInput(const json& input, json& messages) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return;
  }
  if (!input.is_array()) WrongType("input", "a string or an array of items", input);
  std::string reasoning;  // a reasoning item goes with the assistant turn that follows it
  // The assistant message that function_call items join (the last one, if it is the last message).
  auto assistant = [&]() -> json& {
    if (messages.empty() || messages.back()["role"] != "assistant") {
      messages.push_back({{"role", "assistant"}, {"content", ""}});
    }
    json& m = messages.back();
    if (!reasoning.empty()) {
      m["reasoning_content"] = std::exchange(reasoning, {});
    }
    return m;
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string pi = "input[" + std::to_string(i) + "]";
    const json& item = Object(input[i], pi);
    std::string type = "message";
    if (const json* t = Field(item, "type")) type = String(*t, pi + ".type");
    if (type == "message") {
      const json* role = Field(item, "role");
      if (!role) BadRequest(pi + ".role", "'" + pi + ".role' is required");
      std::string r = String(*role, pi + ".role");
      if (r == "developer") r = "system";
      if (r != "user" && r != "system" && r != "assistant") {
        BadRequest(pi + ".role", "unknown role '" + r + "' (user, system, developer or assistant)");
      }
      const json* content = Field(item, "content");
      if (!content) BadRequest(pi + ".content", "'" + pi + ".content' is required");
      const std::string text = ItemText(*content, pi + ".content");
      if (r == "assistant") {
        json& m = assistant();
        m["content"] = m["content"].get<std::string>() + text;
      } else {
        messages.push_back({{"role", r}, {"content", text}});
      }
    } else if (type == "function_call") {
      const json* name = Field(item, "name");
      const json* call_id = Field(item, "call_id");
      if (!name) BadRequest(pi + ".name", "'" + pi + ".name' is required");
      if (!call_id) BadRequest(pi + ".call_id", "'" + pi + ".call_id' is required");
      std::string args = "{}";
      if (const json* a = Field(item, "arguments")) args = String(*a, pi + ".arguments");
      json& m = assistant();
      if (!m.contains("tool_calls")) m["tool_calls"] = json::array();
      m["tool_calls"].push_back(
          {{"id", String(*call_id, pi + ".call_id")},
           {"type", "function"},
           {"function", {{"name", String(*name, pi + ".name")}, {"arguments", args}}}});
    } else if (type == "function_call_output") {
      const json* call_id = Field(item, "call_id");
      if (!call_id) BadRequest(pi + ".call_id", "'" + pi + ".call_id' is required");
      const json* output = Field(item, "output");
      if (!output) BadRequest(pi + ".output", "'" + pi + ".output' is required");
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", String(*call_id, pi + ".call_id")},
                          {"content", ItemText(*output, pi + ".output")}});
    } else if (type == "reasoning") {
      for (const char* key : {"content", "summary"}) {
        const json* parts = Field(item, key);
        if (!parts) continue;
        if (!parts->is_array()) WrongType(pi + "." + key, "an array", *parts);
        for (const json& p : *parts) {
          if (const json* t = p.is_object() ? Field(p, "text") : nullptr; t && t->is_string()) {
            reasoning += t->get<std::string>();
          }
        }
        if (!reasoning.empty()) break;  // the full text when given, else the summary
      }
    } else {
      BadRequest(pi + ".type", "input item type '" + type +
                                   "' is not supported (message, function_call, "
                                   "function_call_output, reasoning)");
    }
  }
}

}  // namespace

nlohmann::ordered_json ResponsesToChat(const nlohmann::ordered_json& body) {
  for (const char* f : {"previous_response_id", "conversation"}) {
    if (Field(body, f)) {
      BadRequest(f, std::string("'") + f +
                        "' is not supported: this server keeps no responses (store is always "
                        "false); send the whole conversation in 'input'");
    }
  }
  if (const json* v = Field(body, "background"); v && Bool(*v, "background")) {
    BadRequest("background", "background responses are not supported (nothing is stored)");
  }
  json messages = json::array();
  if (const json* v = Field(body, "instructions")) {
    messages.push_back({{"role", "system"}, {"content", String(*v, "instructions")}});
  }
  const json* input = Field(body, "input");
  if (!input) BadRequest("input", "'input' is required");
  ConvertInput(*input, messages);
  json chat = {{"messages", messages}};
  if (const json* v = Field(body, "model")) String(*v, "model");
  if (const json* v = Field(body, "store")) Bool(*v, "store");
  if (const json* v = Field(body, "metadata")) Object(*v, "metadata");
  if (const json* v = Field(body, "max_output_tokens")) {
    chat["max_tokens"] = Integer(*v, "max_output_tokens", 1, std::numeric_limits<int32_t>::max());
  }
  for (const char* f : {"temperature", "top_p", "stream", "parallel_tool_calls", "crossword",
                        "top_logprobs", "stream_options"}) {
    if (const json* v = Field(body, f)) chat[f] = *v;
  }
  if (const json* v = Field(body, "tools")) {
    if (!v->is_array()) WrongType("tools", "an array of tools", *v);
    json tools = json::array();
    for (size_t i = 0; i < v->size(); ++i) {
      const std::string pt = "tools[" + std::to_string(i) + "]";
      const json& t = Object((*v)[i], pt);
      const json* type = Field(t, "type");
      if (!type || String(*type, pt + ".type") != "function") {
        BadRequest(pt + ".type", "only function tools are available here");
      }
      json fn = json::object();
      for (const char* k : {"name", "description", "parameters"}) {
        if (const json* x = Field(t, k)) fn[k] = *x;
      }
      tools.push_back({{"type", "function"}, {"function", fn}});
    }
    chat["tools"] = tools;
  }
  if (const json* v = Field(body, "tool_choice")) {
    if (v->is_string()) {
      chat["tool_choice"] = *v;
    } else {
      const json& tc = Object(*v, "tool_choice");
      const json* name = Field(tc, "name");
      if (!name) BadRequest("tool_choice.name", "a named tool_choice needs 'name'");
      chat["tool_choice"] = {{"type", "function"},
                             {"function", {{"name", String(*name, "tool_choice.name")}}}};
    }
  }
  if (const json* v = Field(body, "reasoning")) {
    if (const json* e = Field(Object(*v, "reasoning"), "effort")) {
      const std::string& effort = String(*e, "reasoning.effort");
      if (effort == "none" || effort == "minimal") {
        chat["chat_template_kwargs"] = {{"enable_thinking", false}};
      } else if (effort == "low" || effort == "medium" || effort == "high") {
        chat["chat_template_kwargs"] = {{"enable_thinking", true}};
      } else {
        BadRequest("reasoning.effort",
                   "'reasoning.effort' must be none, minimal, low, medium or high (got \"" +
                       effort + "\")");
      }
    }
  }
  if (const json* v = Field(body, "text")) {
    if (const json* f = Field(Object(*v, "text"), "format")) {
      const json& fmt = Object(*f, "text.format");
      const json* type = Field(fmt, "type");
      if (!type) BadRequest("text.format.type", "'text.format.type' is required");
      const std::string& t = String(*type, "text.format.type");
      if (t == "json_schema") {
        json spec = json::object();
        for (const char* k : {"name", "schema", "strict"}) {
          if (const json* x = Field(fmt, k)) spec[k] = *x;
        }
        chat["response_format"] = {{"type", "json_schema"}, {"json_schema", spec}};
      } else if (t == "json_object" || t == "text") {
        chat["response_format"] = {{"type", t}};
      } else {
        BadRequest("text.format.type",
                   "'text.format.type' must be text, json_object or "
                   "json_schema (got \"" +
                       t + "\")");
      }
    }
  }
  chat["reasoning_format"] = "deepseek";
  return chat;
}

ResponsesEcho ResponsesEchoOf(const nlohmann::ordered_json& body) {
  ResponsesEcho e;
  auto get = [&](const char* k, json dflt) {
    const json* v = Field(body, k);
    e.fields[k] = v ? *v : std::move(dflt);
  };
  get("instructions", nullptr);
  get("max_output_tokens", nullptr);
  get("parallel_tool_calls", true);
  e.fields["previous_response_id"] = nullptr;
  get("reasoning", json{{"effort", nullptr}, {"summary", nullptr}});
  e.fields["store"] = false;
  get("temperature", 1.0);
  get("text", json{{"format", {{"type", "text"}}}});
  get("tool_choice", "auto");
  get("tools", json::array());
  get("top_p", 1.0);
  e.fields["truncation"] = "disabled";
  get("metadata", json::object());
  return e;
}

}  // namespace crossword::server
