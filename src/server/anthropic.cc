// Anthropic's Messages API: POST /v1/messages (plain and streamed) and
// /v1/messages/count_tokens. A Messages body is translated into the equivalent chat request
// (anthropic_request.cc; validated by the same parser), runs through the same exchange, and its
// deltas are written as Anthropic content blocks and events. docs/server.md lists the fields.
#include "server/anthropic.h"

#include "server/server_impl.h"

namespace crossword::server {

using json = nlohmann::ordered_json;
using Kind = chat::StreamDelta::Kind;

namespace {

const char* StopReason(const Finished& f, size_t n_calls) {
  if (f.outcome.finish == decode::FinishReason::kLength) return "max_tokens";
  if (!f.stop_string.empty()) return "stop_sequence";
  return n_calls > 0 ? "tool_use" : "end_turn";
}

json Usage(int64_t prompt_tokens, int64_t cached, int64_t output) {
  return {{"input_tokens", prompt_tokens - cached},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", cached},
          {"output_tokens", output}};
}

json ParsedInput(const std::string& arguments) {
  try {
    json j = json::parse(arguments.empty() ? "{}" : arguments);
    if (j.is_object()) return j;
  } catch (const json::exception&) {
  }
  return json::object();  // cut off by max_tokens: the call's arguments are incomplete
}

class MessagesWriter : public ProtocolWriter {
 public:
  explicit MessagesWriter(WriterContext c) : c_(std::move(c)) {}

  json Final(std::span<const chat::StreamDelta> deltas, Finished& f) override {
    MessageBuilder mb;
    for (const auto& d : deltas) mb.Add(d);
    json content = json::array();
    if (!mb.reasoning.empty())
      content.push_back({{"type", "thinking"}, {"thinking", mb.reasoning}, {"signature", ""}});
    if (!mb.content.empty()) content.push_back({{"type", "text"}, {"text", mb.content}});
    for (const auto& call : mb.calls) {
      content.push_back({{"type", "tool_use"},
                         {"id", c_.new_id("toolu_")},
                         {"name", call.name},
                         {"input", ParsedInput(call.arguments)}});
    }
    json body = Message(std::move(content));
    body["stop_reason"] = StopReason(f, mb.calls.size());
    if (!f.stop_string.empty()) body["stop_sequence"] = f.stop_string;
    body["usage"] = Usage(f.outcome.prompt_tokens, f.outcome.cached_tokens,
                          static_cast<int64_t>(f.outcome.output.size()));
    body["timings"] = TimingsJson(f, c_.mode);
    return body;
  }

  std::string Head() override {
    json m = Message(json::array());
    m["usage"] = Usage(c_.prompt_tokens, 0, 0);
    return NamedSse("message_start", {{"type", "message_start"}, {"message", m}});
  }

  std::string Deltas(std::span<const chat::StreamDelta> deltas, std::vector<json>& lp) override {
    lp.clear();  // Anthropic's API has no token logprobs
    std::string out;
    for (const auto& d : deltas) {
      if (d.kind != Kind::kToolCallStart && d.text.empty()) continue;
      if (d.kind == Kind::kToolCallStart) {
        out += Close();
        ++n_calls_;
        open_ = Open::kTool;
        out += NamedSse("content_block_start", {{"type", "content_block_start"},
                                                {"index", index_},
                                                {"content_block",
                                                 {{"type", "tool_use"},
                                                  {"id", c_.new_id("toolu_")},
                                                  {"name", d.name},
                                                  {"input", json::object()}}}});
        continue;
      }
      if (d.kind == Kind::kToolCallArguments) {
        if (open_ != Open::kTool) continue;  // arguments without a start: nothing to attach to
        out += Delta({{"type", "input_json_delta"}, {"partial_json", d.text}});
        continue;
      }
      const bool thinking = d.kind == Kind::kReasoning;
      const Open want = thinking ? Open::kThinking : Open::kText;
      if (open_ != want) {
        out += Close();
        open_ = want;
        out += NamedSse("content_block_start",
                        {{"type", "content_block_start"},
                         {"index", index_},
                         {"content_block",
                          thinking ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                                   : json{{"type", "text"}, {"text", ""}}}});
      }
      out += thinking ? Delta({{"type", "thinking_delta"}, {"thinking", d.text}})
                      : Delta({{"type", "text_delta"}, {"text", d.text}});
    }
    return out;
  }

  std::string Trace(const PassTrace& t) override {
    json j = {{"type", "crossword_trace"}};
    const json fields = TraceJson(t);
    for (const auto& [k, v] : fields.items()) j[k] = v;
    return NamedSse("crossword_trace", j);
  }

  std::string Tail(Finished& f) override {
    std::string out = Close();
    json delta = {{"stop_reason", StopReason(f, n_calls_)}, {"stop_sequence", nullptr}};
    if (!f.stop_string.empty()) delta["stop_sequence"] = f.stop_string;
    out +=
        NamedSse("message_delta", {{"type", "message_delta"},
                                   {"delta", delta},
                                   {"usage", Usage(f.outcome.prompt_tokens, f.outcome.cached_tokens,
                                                   static_cast<int64_t>(f.outcome.output.size()))},
                                   {"timings", TimingsJson(f, c_.mode)}});
    return out + NamedSse("message_stop", {{"type", "message_stop"}});
  }

  std::string StreamError(const ApiError& e) override {
    return NamedSse("error", ErrorJson(e, ErrorShape::kAnthropic));
  }

 private:
  enum class Open : uint8_t { kNone, kThinking, kText, kTool };

  json Message(json content) const {
    return {{"id", c_.id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", c_.model},
            {"content", std::move(content)},
            {"stop_reason", nullptr},
            {"stop_sequence", nullptr}};
  }
  std::string Delta(json delta) const {
    return NamedSse("content_block_delta",
                    {{"type", "content_block_delta"}, {"index", index_}, {"delta", delta}});
  }
  // Ends the open block (if any); the next one gets the next index.
  std::string Close() {
    if (open_ == Open::kNone) return "";
    open_ = Open::kNone;
    return NamedSse("content_block_stop", {{"type", "content_block_stop"}, {"index", index_++}});
  }

  WriterContext c_;
  Open open_ = Open::kNone;
  int index_ = 0;
  size_t n_calls_ = 0;
};

}  // namespace

std::unique_ptr<ProtocolWriter> MakeMessagesWriter(WriterContext c) {
  return std::make_unique<MessagesWriter>(std::move(c));
}

void Server::Impl::HandleMessages(const http::Request& req, http::Response& res) {
  const json body = ParseBody(req.body);
  GenerationJob job = ChatJob(ParseChatRequest(MessagesToChat(body, false), defaults));
  job.id_prefix = "msg_";
  job.writer = MakeMessagesWriter;
  Generate(req, res, std::move(job));
}

void Server::Impl::HandleCountTokens(const http::Request& req, http::Response& res) {
  const json body = ParseBody(req.body);
  const GenerationJob job = ChatJob(ParseChatRequest(MessagesToChat(body, true), defaults));
  res.set_content(Dump({{"input_tokens", job.prompt.size()}}), "application/json");
}

}  // namespace crossword::server
