// Output parsing tests: hand-written expected reasoning/content/tool calls for model outputs of
// the Qwen3.5 family, and streaming checks (every split point, byte by byte, random chunks) that
// the concatenated deltas equal the one-shot result and never hold half a tag.
#include "chat/output_parser.h"

#include <gtest/gtest.h>

#include <random>

#include "base/error.h"

namespace crossword::chat {
namespace {

using Json = nlohmann::ordered_json;

const Json kWeatherTools = Json::parse(R"([{"type": "function", "function": {"name": "w",
  "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "opts": {"type": "object"},
    "temp": {"type": "number"}, "metric": {"type": "boolean"}, "tags": {"type": "array"},
    "when": {"type": ["integer", "null"]}, "note": {"type": "string"}}}}},
  {"type": "function", "function": {"name": "write", "parameters": {"type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}])");

ParseOptions Opts(bool thinking_opened = false, Json tools = kWeatherTools) {
  ParseOptions o;
  o.thinking_opened = thinking_opened;
  o.tools = std::move(tools);
  return o;
}

// Rebuilds a ParsedOutput from streamed deltas (arguments parsed from their JSON text).
struct Collected {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments JSON text
};

void Collect(const std::vector<StreamDelta>& deltas, Collected* c) {
  for (const StreamDelta& d : deltas) {
    switch (d.kind) {
      case StreamDelta::Kind::kReasoning:
        c->reasoning += d.text;
        break;
      case StreamDelta::Kind::kContent:
        c->content += d.text;
        break;
      case StreamDelta::Kind::kToolCallStart:
        ASSERT_EQ(d.index, static_cast<int>(c->calls.size()));
        c->calls.emplace_back(d.name, "");
        break;
      case StreamDelta::Kind::kToolCallArguments:
        ASSERT_GE(d.index, 0);
        ASSERT_LT(d.index, static_cast<int>(c->calls.size()));
        c->calls[d.index].second += d.text;
        break;
    }
  }
}

Collected Stream(const std::vector<std::string>& chunks, const ParseOptions& o,
                 ParsedOutput* result) {
  StreamParser p(o);
  Collected c;
  for (const std::string& chunk : chunks) Collect(p.Feed(chunk), &c);
  Collect(p.Finish(), &c);
  *result = p.result();
  return c;
}

void ExpectSame(const Collected& c, const ParsedOutput& r, const std::string& label) {
  EXPECT_EQ(c.reasoning, r.reasoning) << label;
  EXPECT_EQ(c.content, r.content) << label;
  ASSERT_EQ(c.calls.size(), r.tool_calls.size()) << label;
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(c.calls[i].first, r.tool_calls[i].name) << label;
    EXPECT_EQ(c.calls[i].second, r.tool_calls[i].ArgumentsJson()) << label;
    EXPECT_EQ(Json::parse(c.calls[i].second), r.tool_calls[i].arguments) << label;
  }
}

// Parses `text` one-shot and streamed in many chunkings; all must agree.
ParsedOutput ParseAllWays(const std::string& text, const ParseOptions& o) {
  ParsedOutput one = ParseOutput(text, o);
  ParsedOutput r;
  for (size_t i = 0; i <= text.size(); ++i) {
    Collected c = Stream({text.substr(0, i), text.substr(i)}, o, &r);
    ExpectSame(c, one, "split at " + std::to_string(i));
  }
  std::vector<std::string> bytes;
  for (char ch : text) bytes.emplace_back(1, ch);
  ExpectSame(Stream(bytes, o, &r), one, "byte by byte");
  std::mt19937 rng(42);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::string> chunks;
    for (size_t i = 0; i < text.size();) {
      size_t n = 1 + rng() % 7;
      chunks.push_back(text.substr(i, n));
      i += n;
    }
    ExpectSame(Stream(chunks, o, &r), one, "random chunks " + std::to_string(trial));
  }
  return one;
}

TEST(OutputParser, PlainTextWithoutTags) {
  ParsedOutput r = ParseAllWays("Hello, world! 2 < 3 and a <b>bold</b> claim.", Opts());
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "Hello, world! 2 < 3 and a <b>bold</b> claim.");
  EXPECT_TRUE(r.tool_calls.empty());
}

TEST(OutputParser, ReasoningWhenPromptOpenedThink) {
  ParsedOutput r = ParseAllWays("Okay, 1+1 is 2.\n</think>\n\nThe answer is 2.", Opts(true));
  EXPECT_EQ(r.reasoning, "Okay, 1+1 is 2.");
  EXPECT_EQ(r.content, "The answer is 2.");
}

TEST(OutputParser, ReasoningChunksNeverContainHalfTags) {
  StreamParser p(Opts(true));
  std::vector<StreamDelta> all;
  for (const char* chunk : {"Okay, 1+1 is 2.\n</th", "ink>\n\nThe answer", " is 2."}) {
    for (StreamDelta& d : p.Feed(chunk)) all.push_back(std::move(d));
  }
  for (StreamDelta& d : p.Finish()) all.push_back(std::move(d));
  std::string reasoning, content;
  for (const StreamDelta& d : all) {
    EXPECT_EQ(d.text.find('<'), std::string::npos) << d.text;
    EXPECT_EQ(d.text.find("</th"), std::string::npos) << d.text;
    EXPECT_EQ(d.text.find("think>"), std::string::npos) << d.text;
    (d.kind == StreamDelta::Kind::kReasoning ? reasoning : content) += d.text;
  }
  EXPECT_EQ(reasoning, "Okay, 1+1 is 2.");
  EXPECT_EQ(content, "The answer is 2.");
}

TEST(OutputParser, OutputStoppingInsideThinkIsAllReasoning) {
  ParsedOutput r = ParseAllWays("Let me weigh 3 options:\n1. a < b\n2. </thi", Opts(true));
  EXPECT_EQ(r.reasoning, "Let me weigh 3 options:\n1. a < b\n2. </thi");
  EXPECT_EQ(r.content, "");
}

TEST(OutputParser, ThinkBlockOpenedByTheModel) {
  ParsedOutput r = ParseAllWays("<think>\nShort.\n</think>\n\nLong answer.\n", Opts(false));
  EXPECT_EQ(r.reasoning, "Short.");
  EXPECT_EQ(r.content, "Long answer.");
  ParsedOutput empty = ParseAllWays("<think>\n\n</think>\n\nHi", Opts(false));
  EXPECT_EQ(empty.reasoning, "");
  EXPECT_EQ(empty.content, "Hi");
  // A repeated <think> right after an opened prompt is not reasoning text.
  EXPECT_EQ(ParseAllWays("<think>\nR</think>C", Opts(true)).reasoning, "R");
}

TEST(OutputParser, TwoParallelCallsTypedBySchema) {
  ParsedOutput r = ParseAllWays(
      "<tool_call>\n<function=w>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
      "</parameter>\n<parameter=opts>\n{\"unit\": \"c\"}\n</parameter>\n</function>\n</tool_call>\n"
      "<tool_call>\n<function=w>\n<parameter=city>\nRome\n</parameter>\n<parameter=days>\n1\n"
      "</parameter>\n</function>\n</tool_call>",
      Opts());
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].name, "w");
  EXPECT_EQ(r.tool_calls[0].arguments,
            Json::parse(R"({"city": "Paris", "days": 3, "opts": {"unit": "c"}})"));
  EXPECT_EQ(r.tool_calls[1].arguments, Json::parse(R"({"city": "Rome", "days": 1})"));
  EXPECT_EQ(r.tool_calls[0].ArgumentsJson(), R"({"city":"Paris","days":3,"opts":{"unit":"c"}})");
}

TEST(OutputParser, ValuesWithTagsNewlinesAndAngleBrackets) {
  const std::string code = "if a<b:\n    print(\"<ok>\")\nx = \"</parameter> in a line\"";
  ParsedOutput r = ParseAllWays(
      "<tool_call>\n<function=write>\n<parameter=path>\n/tmp/a.py\n</parameter>\n"
      "<parameter=content>\n" +
          code + "\n</parameter>\n</function>\n</tool_call>",
      Opts());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments["path"], "/tmp/a.py");
  EXPECT_EQ(r.tool_calls[0].arguments["content"], code);
}

TEST(OutputParser, ExactlyOneNewlineStrippedEachSide) {
  ParsedOutput r = ParseAllWays(
      "<tool_call>\n<function=write>\n<parameter=content>\n\n  x\n\n</parameter>\n"
      "<parameter=path>\n\n</parameter>\n</function>\n</tool_call>",
      Opts());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments["content"], "\n  x\n");
  EXPECT_EQ(r.tool_calls[0].arguments["path"], "");
}

std::string OneParamCall(const std::string& param, const std::string& value) {
  return "<tool_call>\n<function=w>\n<parameter=" + param + ">\n" + value +
         "\n</parameter>\n</function>\n</tool_call>";
}

Json OneParam(const std::string& param, const std::string& value) {
  ParsedOutput r = ParseAllWays(OneParamCall(param, value), Opts());
  EXPECT_EQ(r.tool_calls.size(), 1u);
  return r.tool_calls.empty() ? Json() : r.tool_calls[0].arguments[param];
}

TEST(OutputParser, TypingFollowsVllmQwen3Coder) {
  EXPECT_EQ(OneParam("days", "140.0"), Json(140));
  EXPECT_TRUE(OneParam("days", "140.0").is_number_integer());
  EXPECT_EQ(OneParam("days", "2026-01-15"), Json("2026-01-15"));
  EXPECT_EQ(OneParam("days", " 42 "), Json(42));
  EXPECT_EQ(OneParam("temp", "2.50"), Json(2.5));
  EXPECT_EQ(OneParam("temp", "-3.5e2"), Json(-350));
  EXPECT_EQ(OneParam("metric", "True"), Json(true));
  EXPECT_EQ(OneParam("metric", "false"), Json(false));
  EXPECT_EQ(OneParam("days", "None"), Json(nullptr));
  EXPECT_EQ(OneParam("when", "null"), Json(nullptr));
  EXPECT_EQ(OneParam("when", "7"), Json(7));
  EXPECT_EQ(OneParam("unknown_param", "42"), Json("42"));
  EXPECT_EQ(OneParam("city", "123"), Json("123"));
  EXPECT_EQ(OneParam("tags", "[1, \"a\", null]"), Json::parse(R"([1, "a", null])"));
  EXPECT_EQ(OneParam("opts", "{'deep': {'on': True, 'n': None}, 'l': (1, 2.5)}"),
            Json::parse(R"({"deep": {"on": true, "n": null}, "l": [1, 2.5]})"));
}

TEST(OutputParser, ValuesThatDoNotFitTheirTypeKeepTheCall) {
  EXPECT_EQ(OneParam("days", "three"), Json("three"));
  EXPECT_EQ(OneParam("metric", "yes"), Json("yes"));
  EXPECT_EQ(OneParam("temp", "warm-ish"), Json("warm-ish"));
  EXPECT_EQ(OneParam("opts", "{broken json"), Json("{broken json"));
}

TEST(OutputParser, UnknownToolKeepsStrings) {
  ParsedOutput r = ParseAllWays(
      "<tool_call>\n<function=other>\n<parameter=n>\n5\n</parameter>\n"
      "</function>\n</tool_call>",
      Opts());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, Json::parse(R"({"n": "5"})"));
}

TEST(OutputParser, CallRightAfterThinkAndTextBeforeCall) {
  ParsedOutput r = ParseAllWays(
      "Need weather.</think><tool_call>\n<function=w>\n<parameter=city>\nOslo\n"
      "</parameter>\n</function>\n</tool_call>",
      Opts(true));
  EXPECT_EQ(r.reasoning, "Need weather.");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments["city"], "Oslo");

  ParsedOutput t =
      ParseAllWays("Let me check both cities.\n\n" + OneParamCall("city", "Lisbon"), Opts());
  EXPECT_EQ(t.content, "Let me check both cities.");
  ASSERT_EQ(t.tool_calls.size(), 1u);
  EXPECT_EQ(t.tool_calls[0].arguments["city"], "Lisbon");
}

TEST(OutputParser, ToolCallInsideUnclosedReasoningEndsIt) {
  ParsedOutput r = ParseAllWays("I will call w.\n" + OneParamCall("city", "Rome"), Opts(true));
  EXPECT_EQ(r.reasoning, "I will call w.");
  ASSERT_EQ(r.tool_calls.size(), 1u);
}

TEST(OutputParser, StreamCutInsideTags) {
  EXPECT_EQ(ParseAllWays("Hi <tool_ca", Opts()).content, "Hi <tool_ca");
  ParsedOutput name = ParseAllWays("Hi\n<tool_call>\n<function=w", Opts());
  EXPECT_EQ(name.content, "Hi\n<tool_call>\n<function=w");
  EXPECT_TRUE(name.tool_calls.empty());
  ParsedOutput value = ParseAllWays("<tool_call>\n<function=w>\n<parameter=city>\nPar", Opts());
  ASSERT_EQ(value.tool_calls.size(), 1u);
  EXPECT_EQ(value.tool_calls[0].arguments, Json::parse(R"({"city": "Par"})"));
  ParsedOutput close =
      ParseAllWays("<tool_call>\n<function=w>\n<parameter=days>\n12\n</param", Opts());
  ASSERT_EQ(close.tool_calls.size(), 1u);
  EXPECT_EQ(close.tool_calls[0].arguments["days"], Json("12\n</param"));
  ParsedOutput between =
      ParseAllWays("<tool_call>\n<function=w>\n<parameter=days>\n12\n</parameter>\n<para", Opts());
  ASSERT_EQ(between.tool_calls.size(), 1u);
  EXPECT_EQ(between.tool_calls[0].arguments, Json::parse(R"({"days": 12})"));
}

TEST(OutputParser, CallsWithoutParametersOrClosingTag) {
  ParsedOutput r = ParseAllWays("<tool_call>\n<function=now>\n</function>\n</tool_call>", Opts());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "now");
  EXPECT_EQ(r.tool_calls[0].ArgumentsJson(), "{}");
  ParsedOutput open = ParseAllWays(
      "<tool_call>\n<function=w>\n<parameter=city>\nX\n</parameter>\n</function>", Opts());
  ASSERT_EQ(open.tool_calls.size(), 1u);
  EXPECT_EQ(open.tool_calls[0].arguments["city"], "X");
}

TEST(OutputParser, ContentAfterCalls) {
  ParsedOutput r = ParseAllWays(OneParamCall("city", "A") + "\nDone.\n", Opts());
  EXPECT_EQ(r.content, "Done.");
  ASSERT_EQ(r.tool_calls.size(), 1u);
}

TEST(OutputParser, JsonStyleToolCall) {
  ParsedOutput r = ParseAllWays(
      "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\": \"Oslo\", \"days\": "
      "2}}\n</tool_call>",
      Opts());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, Json::parse(R"({"city": "Oslo", "days": 2})"));
  ParsedOutput bad = ParseAllWays("<tool_call>\n{not json}\n</tool_call>", Opts());
  EXPECT_TRUE(bad.tool_calls.empty());
  EXPECT_EQ(bad.content, "<tool_call>\n{not json}\n</tool_call>");
}

TEST(OutputParser, ToolCallParsingOff) {
  ParseOptions o = Opts();
  o.parse_tool_calls = false;
  std::string text = OneParamCall("city", "A");
  ParsedOutput r = ParseAllWays(text, o);
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.content, text);
}

TEST(OutputParser, WhitespaceOnlyAndEmpty) {
  ParsedOutput r = ParseAllWays(" \n\t ", Opts());
  EXPECT_EQ(r.content, "");
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(ParseAllWays("", Opts(true)).reasoning, "");
}

TEST(OutputParser, Utf8IsNeverSplitAndInvalidBytesAreReplacedInArguments) {
  std::string emoji = "\xF0\x9F\x98\x8A";  // 😊
  StreamParser p(Opts());
  std::string content;
  for (char ch : "Hi " + emoji + emoji) {
    for (const StreamDelta& d : p.Feed(std::string(1, ch))) {
      // Every delta is whole characters: no delta ends inside a UTF-8 sequence.
      if (!d.text.empty()) {
        EXPECT_NE(static_cast<unsigned char>(d.text.back()) & 0xC0, 0xC0);
      }
      content += d.text;
    }
  }
  for (const StreamDelta& d : p.Finish()) content += d.text;
  EXPECT_EQ(content, "Hi " + emoji + emoji);
  ParsedOutput r = ParseAllWays(OneParamCall("city", "Z\xFFrich " + emoji), Opts());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments["city"], "Z\xEF\xBF\xBDrich " + emoji);
}

TEST(OutputParser, StringEscapingMatchesJsonDump) {
  std::string weird = "quote\" back\\ tab\t nl\n cr\r bell\x07 del\x7f ünï";
  ParsedOutput r = ParseAllWays(OneParamCall("note", weird), Opts());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments["note"], weird);
  EXPECT_EQ(r.tool_calls[0].ArgumentsJson(), Json({{"note", weird}}).dump());
}

TEST(OutputParser, PromptOpensThinking) {
  EXPECT_TRUE(PromptOpensThinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(PromptOpensThinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(PromptOpensThinking("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"));
}

TEST(OutputParser, FeedAfterFinishIsAnError) {
  StreamParser p;
  p.Feed("x");
  p.Finish();
  EXPECT_THROW(p.Feed("y"), crossword::Error);
}

}  // namespace
}  // namespace crossword::chat
