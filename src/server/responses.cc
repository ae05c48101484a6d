// OpenAI's Responses API, stateless: POST /v1/responses (plain and streamed). A Responses body is
// translated into the equivalent chat request (validated by the same parser), runs through the
// same exchange, and its deltas are written as output items and response.* events.
#include "server/responses.h"

#include <algorithm>
#include <cmath>

#include "server/server_impl.h"

namespace crossword::server {

using json = nlohmann::ordered_json;
using Kind = chat::StreamDelta::Kind;

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

namespace {

class ResponsesWriter : public ProtocolWriter {
 public:
  ResponsesWriter(WriterContext c, ResponsesEcho echo) : c_(std::move(c)), echo_(std::move(echo)) {}

  json Final(std::span<const chat::StreamDelta> deltas, Finished& f) override {
    MessageBuilder mb;
    for (const auto& d : deltas) mb.Add(d);
    json output = json::array();
    if (!mb.reasoning.empty()) output.push_back(ReasoningItem(c_.new_id("rs_"), mb.reasoning));
    if (!mb.content.empty() || mb.calls.empty())
      output.push_back(MessageItem(c_.new_id("msg_"), mb.content, "completed"));
    for (const auto& call : mb.calls) {
      output.push_back(
          CallItem(c_.new_id("fc_"), c_.new_id("call_"), call.name, call.arguments, "completed"));
    }
    return Response(&f, std::move(output));
  }

  std::string Head() override {
    json r = Response(nullptr, json::array());
    // Event() numbers events: each call is its own statement (the operands of + are unsequenced).
    std::string out = Event("response.created", {{"response", r}});
    out += Event("response.in_progress", {{"response", r}});
    return out;
  }

  std::string Deltas(std::span<const chat::StreamDelta> deltas, std::vector<json>& lp) override {
    lp.clear();
    std::string out;
    for (const auto& d : deltas) {
      if (d.kind != Kind::kToolCallStart && d.text.empty()) continue;
      if (d.kind == Kind::kToolCallStart) {
        out += Close();
        Item& it = Start(Open::kCall);
        it.name = d.name;
        it.call_id = c_.new_id("call_");
        it.id = c_.new_id("fc_");
        out += Event("response.output_item.added",
                     {{"output_index", it.index},
                      {"item", CallItem(it.id, it.call_id, it.name, "", "in_progress")}});
        continue;
      }
      if (d.kind == Kind::kToolCallArguments) {
        if (open_ != Open::kCall) continue;
        items_.back().text += d.text;
        out +=
            Event("response.function_call_arguments.delta", {{"item_id", items_.back().id},
                                                             {"output_index", items_.back().index},
                                                             {"delta", d.text}});
        continue;
      }
      const bool reasoning = d.kind == Kind::kReasoning;
      const Open want = reasoning ? Open::kReasoning : Open::kMessage;
      if (open_ != want) {
        out += Close();
        out += OpenText(reasoning);
      }
      Item& it = items_.back();
      it.text += d.text;
      json ev = {
          {"item_id", it.id}, {"output_index", it.index}, {"content_index", 0}, {"delta", d.text}};
      if (!reasoning) ev["logprobs"] = json::array();
      out += Event(reasoning ? "response.reasoning_text.delta" : "response.output_text.delta", ev);
    }
    return out;
  }

  std::string Trace(const PassTrace& t) override { return Event("crossword.trace", TraceJson(t)); }

  std::string Tail(Finished& f) override {
    std::string out = Close();
    // No text and no call: an empty message item, as in the non-streamed response.
    if (std::none_of(items_.begin(), items_.end(),
                     [](const Item& it) { return it.kind != Open::kReasoning; })) {
      out += OpenText(false);
      out += Close();
    }
    json output = json::array();
    for (const auto& it : items_) output.push_back(Done(it));
    return out + Event("response.completed", {{"response", Response(&f, std::move(output))}});
  }

  std::string StreamError(const ApiError& e) override {
    json r = Response(nullptr, json::array());
    r["status"] = "failed";
    r["error"] = {{"code", "server_error"}, {"message", e.what()}};
    return Event("response.failed", {{"response", r}});
  }

 private:
  enum class Open : uint8_t { kNone, kReasoning, kMessage, kCall };
  struct Item {
    Open kind;
    int index;
    std::string id, call_id, name, text;
  };

  static json Part(bool reasoning, const std::string& text) {
    if (reasoning) return {{"type", "reasoning_text"}, {"text", text}};
    return {{"type", "output_text"},
            {"text", text},
            {"annotations", json::array()},
            {"logprobs", json::array()}};
  }
  static json ReasoningItem(const std::string& id, const std::string& text) {
    return {{"id", id},
            {"type", "reasoning"},
            {"summary", json::array()},
            {"content", json::array({Part(true, text)})}};
  }
  static json MessageItem(const std::string& id, const std::string& text, const char* status) {
    return {{"id", id},
            {"type", "message"},
            {"status", status},
            {"role", "assistant"},
            {"content", json::array({Part(false, text)})}};
  }
  static json CallItem(const std::string& id, const std::string& call_id, const std::string& name,
                       const std::string& arguments, const char* status) {
    return {{"id", id},           {"type", "function_call"},
            {"status", status},   {"arguments", arguments},
            {"call_id", call_id}, {"name", name}};
  }
  json Done(const Item& it) const {
    switch (it.kind) {
      case Open::kReasoning:
        return ReasoningItem(it.id, it.text);
      case Open::kCall:
        return CallItem(it.id, it.call_id, it.name, it.text, "completed");
      default:
        return MessageItem(it.id, it.text, "completed");
    }
  }

  Item& Start(Open kind) {
    open_ = kind;
    items_.push_back({kind, static_cast<int>(items_.size()), {}, {}, {}, {}});
    return items_.back();
  }
  // Opens a reasoning or message item: its added events.
  std::string OpenText(bool reasoning) {
    Item& it = Start(reasoning ? Open::kReasoning : Open::kMessage);
    it.id = c_.new_id(reasoning ? "rs_" : "msg_");
    json item = reasoning ? ReasoningItem(it.id, "") : MessageItem(it.id, "", "in_progress");
    item["content"] = json::array();
    std::string out =
        Event("response.output_item.added", {{"output_index", it.index}, {"item", item}});
    out += Event("response.content_part.added", {{"item_id", it.id},
                                                 {"output_index", it.index},
                                                 {"content_index", 0},
                                                 {"part", Part(reasoning, "")}});
    return out;
  }
  // The done events of the open item.
  std::string Close() {
    if (open_ == Open::kNone) return "";
    const Item& it = items_.back();
    std::string out;
    if (open_ == Open::kCall) {
      out += Event("response.function_call_arguments.done", {{"item_id", it.id},
                                                             {"output_index", it.index},
                                                             {"name", it.name},
                                                             {"arguments", it.text}});
    } else {
      const bool reasoning = open_ == Open::kReasoning;
      out += Event(reasoning ? "response.reasoning_text.done" : "response.output_text.done",
                   {{"item_id", it.id},
                    {"output_index", it.index},
                    {"content_index", 0},
                    {"text", it.text}});
      out += Event("response.content_part.done", {{"item_id", it.id},
                                                  {"output_index", it.index},
                                                  {"content_index", 0},
                                                  {"part", Part(reasoning, it.text)}});
    }
    out += Event("response.output_item.done", {{"output_index", it.index}, {"item", Done(it)}});
    open_ = Open::kNone;
    return out;
  }

  json Response(const Finished* f, json output) const {
    json r = {{"id", c_.id},
              {"object", "response"},
              {"created_at", c_.created},
              {"status", "in_progress"},
              {"background", false},
              {"error", nullptr},
              {"incomplete_details", nullptr},
              {"model", c_.model},
              {"output", std::move(output)}};
    for (const auto& [k, v] : echo_.fields.items()) r[k] = v;
    // The sampling settings in effect, not OpenAI's defaults: a request that names none samples
    // with the server's (greedy unless --temp says otherwise).
    r["temperature"] = std::round(static_cast<double>(c_.temperature) * 1e6) / 1e6;
    r["top_p"] = std::round(static_cast<double>(c_.top_p) * 1e6) / 1e6;
    r["usage"] = nullptr;
    if (f) {
      const auto& o = f->outcome;
      const bool cut = o.finish == decode::FinishReason::kLength;
      r["status"] = cut ? "incomplete" : "completed";
      if (cut) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
      const int64_t out = static_cast<int64_t>(o.output.size());
      r["usage"] = {{"input_tokens", o.prompt_tokens},
                    {"input_tokens_details", {{"cached_tokens", o.cached_tokens}}},
                    {"output_tokens", out},
                    {"output_tokens_details", {{"reasoning_tokens", 0}}},
                    {"total_tokens", o.prompt_tokens + out}};
      r["timings"] = TimingsJson(*f, c_.mode);
    }
    return r;
  }

  std::string Event(const char* type, json fields) {
    json e = {{"type", type}, {"sequence_number", seq_++}};
    for (auto& [k, v] : fields.items()) e[k] = std::move(v);
    return NamedSse(type, e);
  }

  WriterContext c_;
  ResponsesEcho echo_;
  Open open_ = Open::kNone;
  std::vector<Item> items_;
  int64_t seq_ = 0;
};

}  // namespace

std::unique_ptr<ProtocolWriter> MakeResponsesWriter(WriterContext c, ResponsesEcho echo) {
  return std::make_unique<ResponsesWriter>(std::move(c), std::move(echo));
}

void Server::Impl::HandleResponses(const http::Request& req, http::Response& res) {
  const json body = ParseBody(req.body);
  GenerationJob job = ChatJob(ParseChatRequest(ResponsesToChat(body), defaults));
  job.prompt_param = "input";
  job.id_prefix = "resp_";
  job.writer = [echo = ResponsesEchoOf(body)](WriterContext c) {
    return MakeResponsesWriter(std::move(c), echo);
  };
  Generate(req, res, std::move(job));
}

}  // namespace crossword::server
