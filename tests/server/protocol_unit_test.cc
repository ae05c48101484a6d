// Unit tests of the protocol seam without HTTP: for every writer (OpenAI chat and completions,
// Anthropic Messages, OpenAI Responses), a stream cut into random batches folds back into the same
// answer as the non-streamed body built from the same deltas; event order rules per protocol;
// request translation of Messages and Responses bodies into chat requests; error shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>

#include "server/anthropic.h"
#include "server/exchange.h"
#include "server/responses.h"

namespace crossword::server {
namespace {

using json = nlohmann::ordered_json;
using Kind = chat::StreamDelta::Kind;

// A random answer: reasoning, then content, then 0-2 tool calls, in small pieces.
std::vector<chat::StreamDelta> RandomDeltas(std::mt19937& rng) {
  std::vector<chat::StreamDelta> d;
  auto pieces = [&](Kind k, const std::string& text, int index) {
    for (size_t i = 0; i < text.size();) {
      // Pieces end on character boundaries, as the output pipeline's deltas do.
      size_t n = std::min(text.size() - i, size_t{1} + rng() % 5);
      while (i + n < text.size() && (static_cast<unsigned char>(text[i + n]) & 0xC0) == 0x80) ++n;
      d.push_back({k, text.substr(i, n), index, {}});
      i += n;
    }
  };
  if (rng() % 2) pieces(Kind::kReasoning, "Let me think about \"this\".\n", -1);
  if (rng() % 3) pieces(Kind::kContent, "The answer is: ünïcode & <tags>\n", -1);
  const int calls = static_cast<int>(rng() % 3);
  for (int c = 0; c < calls; ++c) {
    d.push_back({Kind::kToolCallStart, "", c, c ? "get_time" : "get_weather"});
    pieces(Kind::kToolCallArguments, R"({"city": "Lisbon", "n": )" + std::to_string(c) + "}", c);
  }
  return d;
}

// Parses SSE text into (event name or "", data JSON or the raw [DONE]).
std::vector<std::pair<std::string, json>> ParseSse(const std::string& text) {
  std::vector<std::pair<std::string, json>> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "an event ends with a blank line";
    if (end == std::string::npos) break;
    const std::string ev = text.substr(at, end - at);
    at = end + 2;
    std::string name;
    std::string data;
    size_t line = 0;
    while (line < ev.size()) {
      size_t nl = ev.find('\n', line);
      if (nl == std::string::npos) nl = ev.size();
      const std::string l = ev.substr(line, nl - line);
      if (l.rfind("event: ", 0) == 0) name = l.substr(7);
      if (l.rfind("data: ", 0) == 0) data = l.substr(6);
      line = nl + 1;
    }
    out.emplace_back(name, data == "[DONE]" ? json("[DONE]") : json::parse(data));
  }
  return out;
}

struct WriterRun {
  json final;
  std::vector<std::pair<std::string, json>> events;
};

// The same answer through one writer twice: non-streamed, and streamed in random batches.
WriterRun Through(const std::function<std::unique_ptr<ProtocolWriter>(WriterContext)>& make,
                  const std::vector<chat::StreamDelta>& deltas, std::mt19937& rng,
                  decode::FinishReason finish = decode::FinishReason::kStop) {
  int ids = 0;
  auto context = [&] {
    WriterContext c;
    c.id = "id-1";
    c.created = 1700000000;
    c.model = "tiny";
    c.prompt_tokens = 9;
    c.new_id = [&ids](const char* p) { return std::string(p) + std::to_string(++ids); };
    return c;
  };
  engine::RequestOutcome o;
  o.finish = finish;
  o.prompt_tokens = 9;
  o.output.assign(17, 1);
  WriterRun r;
  {
    Finished f{o, 0.1, "", {}, {}};
    r.final = make(context())->Final(deltas, f);
  }
  auto w = make(context());
  std::string text = w->Head();
  std::vector<json> lp;
  for (size_t i = 0; i < deltas.size();) {
    const size_t n = std::min(deltas.size() - i, size_t{1} + rng() % 4);
    text += w->Deltas(std::span(deltas).subspan(i, n), lp);
    i += n;
  }
  Finished f{o, 0.1, "", {}, {}};
  text += w->Tail(f);
  r.events = ParseSse(text);
  return r;
}

TEST(ProtocolWriters, ChatStreamFoldsIntoTheNonStreamedMessage) {
  std::mt19937 rng(1);
  for (int round = 0; round < 200; ++round) {
    const auto deltas = RandomDeltas(rng);
    const WriterRun r = Through(MakeChatWriter, deltas, rng);
    std::string content, reasoning, finish;
    std::vector<std::pair<std::string, std::string>> calls;
    ASSERT_EQ(r.events.back().second, json("[DONE]"));
    for (const auto& [name, c] : r.events) {
      if (c.is_string()) continue;
      for (const auto& ch : c["choices"]) {
        const json& d = ch["delta"];
        if (d.contains("content")) content += d["content"].get<std::string>();
        if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
        for (const auto& t : d.value("tool_calls", json::array())) {
          const size_t i = t["index"].get<size_t>();
          if (calls.size() <= i) calls.resize(i + 1);
          if (t["function"].contains("name")) calls[i].first = t["function"]["name"];
          calls[i].second += t["function"]["arguments"].get<std::string>();
        }
        if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
      }
    }
    const json& msg = r.final["choices"][0]["message"];
    EXPECT_EQ(content, msg["content"].is_null() ? "" : msg["content"].get<std::string>());
    EXPECT_EQ(reasoning, msg.value("reasoning_content", ""));
    EXPECT_EQ(finish, r.final["choices"][0]["finish_reason"]);
    ASSERT_EQ(calls.size(), msg.value("tool_calls", json::array()).size());
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i].first, msg["tool_calls"][i]["function"]["name"]);
      EXPECT_EQ(calls[i].second, msg["tool_calls"][i]["function"]["arguments"]);
    }
  }
}

TEST(ProtocolWriters, MessagesStreamFoldsIntoTheNonStreamedMessage) {
  std::mt19937 rng(2);
  for (int round = 0; round < 200; ++round) {
    const auto deltas = RandomDeltas(rng);
    const WriterRun r = Through(MakeMessagesWriter, deltas, rng);
    ASSERT_EQ(r.events.front().first, "message_start");
    ASSERT_EQ(r.events.back().first, "message_stop");
    json blocks = json::array();
    std::vector<std::string> partial;
    int open = -1;
    json stop_reason;
    for (const auto& [name, e] : r.events) {
      EXPECT_EQ(name, e["type"]) << "the SSE event name is the data's type";
      if (name == "content_block_start") {
        ASSERT_EQ(open, -1) << "blocks do not overlap";
        open = e["index"];
        ASSERT_EQ(open, static_cast<int>(blocks.size())) << "indexes count up from 0";
        blocks.push_back(e["content_block"]);
        partial.emplace_back();
      } else if (name == "content_block_delta") {
        ASSERT_EQ(e["index"], open);
        const json& d = e["delta"];
        if (d["type"] == "text_delta")
          blocks[open]["text"] =
              blocks[open]["text"].get<std::string>() + d["text"].get<std::string>();
        if (d["type"] == "thinking_delta")
          blocks[open]["thinking"] =
              blocks[open]["thinking"].get<std::string>() + d["thinking"].get<std::string>();
        if (d["type"] == "input_json_delta") partial[open] += d["partial_json"].get<std::string>();
      } else if (name == "content_block_stop") {
        ASSERT_EQ(e["index"], open);
        if (blocks[open]["type"] == "tool_use") blocks[open]["input"] = json::parse(partial[open]);
        open = -1;
      } else if (name == "message_delta") {
        stop_reason = e["delta"]["stop_reason"];
      }
    }
    EXPECT_EQ(open, -1);
    json want = r.final["content"];
    for (auto* list : {&blocks, &want}) {
      for (auto& b : *list) b.erase("id");
    }
    EXPECT_EQ(blocks, want);
    EXPECT_EQ(stop_reason, r.final["stop_reason"]);
  }
}

TEST(ProtocolWriters, ResponsesStreamFoldsIntoTheNonStreamedResponse) {
  std::mt19937 rng(3);
  auto make = [](WriterContext c) {
    return MakeResponsesWriter(std::move(c), ResponsesEchoOf({}));
  };
  for (int round = 0; round < 200; ++round) {
    const auto deltas = RandomDeltas(rng);
    const WriterRun r = Through(make, deltas, rng);
    ASSERT_EQ(r.events.front().first, "response.created");
    ASSERT_EQ(r.events.back().first, "response.completed");
    json items = json::array();
    std::map<std::string, std::string> text;  // item id -> streamed text or arguments
    for (size_t i = 0; i < r.events.size(); ++i) {
      const auto& [name, e] = r.events[i];
      EXPECT_EQ(e["sequence_number"], i);
      if (name == "response.output_text.delta" || name == "response.reasoning_text.delta" ||
          name == "response.function_call_arguments.delta") {
        text[e["item_id"]] += e["delta"].get<std::string>();
      }
      if (name == "response.output_item.done") items.push_back(e["item"]);
    }
    for (const auto& it : items) {
      const std::string id = it["id"];
      const std::string got = it["type"] == "function_call"
                                  ? it["arguments"].get<std::string>()
                                  : it["content"][0]["text"].get<std::string>();
      EXPECT_EQ(text[id], got);
    }
    EXPECT_EQ(items, r.events.back().second["response"]["output"]);
    json want = r.final["output"];
    for (auto* list : {&items, &want}) {
      for (auto& o : *list) {
        o.erase("id");
        o.erase("call_id");
      }
    }
    EXPECT_EQ(items, want);
    EXPECT_EQ(r.final["status"], "completed");
  }
}

TEST(ProtocolWriters, LengthEndsAreReportedInEachProtocolsWords) {
  std::mt19937 rng(4);
  const std::vector<chat::StreamDelta> d = {{Kind::kContent, "abc", -1, {}}};
  EXPECT_EQ(Through(MakeChatWriter, d, rng, decode::FinishReason::kLength)
                .final["choices"][0]["finish_reason"],
            "length");
  EXPECT_EQ(Through(MakeMessagesWriter, d, rng, decode::FinishReason::kLength).final["stop_reason"],
            "max_tokens");
  auto resp = [](WriterContext c) {
    return MakeResponsesWriter(std::move(c), ResponsesEchoOf({}));
  };
  const json r = Through(resp, d, rng, decode::FinishReason::kLength).final;
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
}

// ---- request translation ---------------------------------------------------------------------

std::string ParamOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.param();
  }
  ADD_FAILURE() << "no ApiError";
  return "";
}

TEST(MessagesToChat, TranslatesBlocksToolsAndChoices) {
  const json body = json::parse(R"({
    "model": "m", "max_tokens": 50, "system": [{"type": "text", "text": "Be brief."}],
    "messages": [
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Need the tool.", "signature": "x"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "6 C"}]},
        {"type": "text", "text": "Thanks"}]}],
    "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "stop_sequences": ["END"], "temperature": 0.5, "top_k": 3,
    "thinking": {"type": "enabled", "budget_tokens": 100}})");
  const json c = MessagesToChat(body, false);
  const json& m = c["messages"];
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0], json({{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(m[2]["reasoning_content"], "Need the tool.");
  EXPECT_EQ(m[2]["content"], "Checking.");
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"], json({{"city", "Oslo"}}));
  EXPECT_EQ(m[3], json({{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "6 C"}}));
  EXPECT_EQ(m[4], json({{"role", "user"}, {"content", "Thanks"}}));
  EXPECT_EQ(c["tools"][0]["function"]["parameters"], json({{"type", "object"}}));
  EXPECT_EQ(c["tool_choice"], "required");
  EXPECT_EQ(c["parallel_tool_calls"], false);
  EXPECT_EQ(c["stop"], json::array({"END"}));
  EXPECT_EQ(c["chat_template_kwargs"]["enable_thinking"], true);
  EXPECT_EQ(c["max_tokens"], 50);
  // Absent thinking is off (Anthropic's default); count_tokens needs no max_tokens.
  const json plain =
      MessagesToChat(json::parse(R"({"messages": [{"role": "user", "content": "x"}]})"), true);
  EXPECT_EQ(plain["chat_template_kwargs"]["enable_thinking"], false);
}

TEST(MessagesToChat, RejectsBadFieldsNamingThem) {
  const json u = json::array({{{"role", "user"}, {"content", "x"}}});
  auto param = [&](json body) {
    if (!body.contains("messages")) body["messages"] = u;
    return ParamOf([&] { MessagesToChat(body, false); });
  };
  EXPECT_EQ(param({{"max_tokens", 1}, {"messages", json::array()}}), "messages");
  EXPECT_EQ(param(json::object()), "max_tokens");
  EXPECT_EQ(param({{"max_tokens", 0}}), "max_tokens");
  EXPECT_EQ(param({{"max_tokens", 1}, {"temperature", 1.5}}), "temperature");
  EXPECT_EQ(param({{"max_tokens", 1}, {"messages", {{{"role", "system"}, {"content", "x"}}}}}),
            "messages[0].role");
  EXPECT_EQ(param({{"max_tokens", 1},
                   {"messages", {{{"role", "user"}, {"content", {{{"type", "image"}}}}}}}}),
            "messages[0].content[0].type");
  EXPECT_EQ(param({{"max_tokens", 1}, {"tools", {{{"name", "t"}}}}}), "tools[0].input_schema");
  EXPECT_EQ(
      param({{"max_tokens", 1}, {"tools", {{{"type", "web_search_20250305"}, {"name", "w"}}}}}),
      "tools[0].type");
  EXPECT_EQ(param({{"max_tokens", 1}, {"tool_choice", {{"type", "tool"}}}}), "tool_choice.name");
  EXPECT_EQ(param({{"max_tokens", 1}, {"thinking", {{"type", "on"}}}}), "thinking.type");
}

TEST(ResponsesToChat, TranslatesItems) {
  const json body = json::parse(R"({
    "model": "m", "instructions": "Be brief.", "max_output_tokens": 20,
    "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "Weather in Oslo?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Tool."}]},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "6 C"}],
    "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
    "tool_choice": {"type": "function", "name": "get_weather"},
    "reasoning": {"effort": "none"}, "text": {"format": {"type": "json_object"}}})");
  const json c = ResponsesToChat(body);
  const json& m = c["messages"];
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[1]["content"], "Weather in Oslo?");
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[2]["reasoning_content"], "Tool.");
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(c["max_tokens"], 20);
  EXPECT_EQ(c["tools"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(c["tool_choice"]["function"]["name"], "get_weather");
  EXPECT_EQ(c["chat_template_kwargs"]["enable_thinking"], false);
  EXPECT_EQ(c["response_format"]["type"], "json_object");
  EXPECT_EQ(ResponsesToChat(json{{"input", "hi"}})["messages"][0],
            json({{"role", "user"}, {"content", "hi"}}));
}

TEST(ResponsesToChat, RefusesStateAndBadItemsNamingThem) {
  auto param = [&](json body) { return ParamOf([&] { ResponsesToChat(body); }); };
  EXPECT_EQ(param({{"input", "x"}, {"previous_response_id", "resp_1"}}), "previous_response_id");
  EXPECT_EQ(param({{"input", "x"}, {"conversation", "c"}}), "conversation");
  EXPECT_EQ(param(json::object()), "input");
  EXPECT_EQ(param({{"input", {{{"type", "file_search_call"}}}}}), "input[0].type");
  EXPECT_EQ(param({{"input", {{{"type", "function_call"}, {"name", "f"}}}}}), "input[0].call_id");
  EXPECT_EQ(param({{"input", "x"}, {"tools", {{{"type", "web_search"}}}}}), "tools[0].type");
  EXPECT_EQ(param({{"input", "x"}, {"reasoning", {{"effort", "max"}}}}), "reasoning.effort");
}

TEST(ErrorJson, AnthropicShapeTakesItsTypeFromTheStatus) {
  const json e =
      ErrorJson(ApiError(400, "invalid_request_error", "x", "bad x"), ErrorShape::kAnthropic);
  EXPECT_EQ(e,
            json::parse(
                R"({"type":"error","error":{"type":"invalid_request_error","message":"bad x"}})"));
  EXPECT_EQ(ErrorJson(ApiError(401, "invalid_request_error", "", "k"),
                      ErrorShape::kAnthropic)["error"]["type"],
            "authentication_error");
  EXPECT_EQ(ErrorJson(ApiError(503, "unavailable_error", "", "busy"),
                      ErrorShape::kAnthropic)["error"]["type"],
            "overloaded_error");
  EXPECT_EQ(
      ErrorJson(ApiError(500, "server_error", "", "oops"), ErrorShape::kAnthropic)["error"]["type"],
      "api_error");
  EXPECT_EQ(ErrorJson(ApiError(400, "invalid_request_error", "x", "bad x"))["error"]["param"], "x");
}

}  // namespace
}  // namespace crossword::server
