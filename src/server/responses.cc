// OpenAI's Responses API, stateless: POST /v1/responses (plain and streamed). A Responses body is
// translated into the equivalent chat request (responses_request.cc; validated by the same
// parser), runs through the same exchange, and its deltas are written as output items and
// response.* events.
#include "server/responses.h"

#include <algorithm>
#include <cmath>

#include "server/server_impl.h"

namespace crossword::server {

using json = nlohmann::ordered_json;
using Kind = chat::StreamDelta::Kind;

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

  // Output tokens spent reasoning: those up to and including `</think>`; all of them when the
  // answer is cut inside its reasoning (a reasoning item and no `</think>`); 0 without reasoning.
  int64_t ReasoningTokens(const engine::RequestOutcome& o, const json& output) const {
    if (c_.think_end >= 0) {
      const auto end = std::find(o.output.begin(), o.output.end(), c_.think_end);
      if (end != o.output.end()) return end - o.output.begin() + 1;
    }
    for (const json& item : output) {
      if (item.value("type", "") == "reasoning") return static_cast<int64_t>(o.output.size());
    }
    return 0;
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
      r["usage"] = {
          {"input_tokens", o.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", o.cached_tokens}}},
          {"output_tokens", out},
          {"output_tokens_details", {{"reasoning_tokens", ReasoningTokens(o, r["output"])}}},
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
