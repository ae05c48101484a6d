// Property test of structured output with the embedded tiny model: 200 schemas generated from a
// fixed seed (objects and arrays of bounded integers, strings with lengths, enums, formats,
// anchored patterns, nested objects and arrays, anyOf, nullable values), each answered in AR,
// spec and block-diffusion mode (greedy; every tenth with thinking on, so the reasoning is free
// text before the constrained JSON), and every output validated with Debian's
// python3-jsonschema (tests/structured/validate.py). Also: spec == constrained AR, token for
// token; and constrained diffusion's tokens per pass next to unconstrained diffusion's.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>

#include "engine/engine.h"
#include "engine/structured.h"
#include "grammar/json_schema.h"

namespace crossword {
namespace {

using Json = nlohmann::ordered_json;

const std::vector<std::string> kNames = {"drone", "to",   "boxes", "city",  "id",   "name",
                                         "when",  "tags", "ok",    "count", "unit", "note"};
const std::vector<std::string> kWords = {"red", "green", "Paris", "Mill Road", "yes", "north"};

Json Value(std::mt19937& rng, int depth);

Json Object(std::mt19937& rng, int depth) {
  Json props = Json::object(), required = Json::array();
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < n; ++i) {
    const std::string& k = kNames[rng() % kNames.size()];
    if (props.contains(k)) continue;
    props[k] = Value(rng, depth + 1);
    if (rng() % 3 != 0) required.push_back(k);
  }
  Json o = {{"type", "object"}, {"properties", props}, {"additionalProperties", false}};
  if (!required.empty()) o["required"] = required;
  return o;
}

Json Value(std::mt19937& rng, int depth) {
  const int kinds = depth < 2 ? 10 : 8;
  switch (rng() % kinds) {
    case 0: {
      const int lo = static_cast<int>(rng() % 41) - 20;
      return {
          {"type", "integer"}, {"minimum", lo}, {"maximum", lo + static_cast<int>(rng() % 300)}};
    }
    case 1: {
      Json s = {{"type", "string"}, {"maxLength", 1 + static_cast<int>(rng() % 8)}};
      if (rng() % 2) s["minLength"] = 1;
      return s;
    }
    case 2: {
      Json e = Json::array();
      for (int i = 0; i < 3; ++i) e.push_back(kWords[(rng() + i) % kWords.size()]);
      if (rng() % 3 == 0) e.push_back(nullptr);
      if (rng() % 3 == 0) e.push_back(7);
      return {{"enum", e}};
    }
    case 3:
      return {{"type", "boolean"}};
    case 4:
      return {{"type", "string"}, {"format", rng() % 2 ? "date" : "uuid"}};
    case 5:
      return {{"type", "string"},
              {"pattern", rng() % 2 ? "^[a-z]{2,5}$" : "^[A-Z][0-9]{2}-(x|yz)$"}};
    case 6:
      return rng() % 2 ? Json{{"anyOf",
                               Json::array({{{"type", "integer"}, {"minimum", 0}, {"maximum", 9}},
                                            {{"type", "null"}}})}}
                       : Json{{"const", kWords[rng() % kWords.size()]}};
    case 7:
      return {{"type", Json::array({"boolean", "null"})}};
    case 8:
      return {{"type", "array"},
              {"items", Value(rng, depth + 1)},
              {"maxItems", 1 + static_cast<int>(rng() % 3)}};
    default:
      return Object(rng, depth);
  }
}

Json Schema(std::mt19937& rng) {
  if (rng() % 5 == 0) {
    return {{"type", "array"}, {"items", Object(rng, 1)}, {"minItems", 1}, {"maxItems", 2}};
  }
  return Object(rng, 0);
}

TEST(StructuredOutput, TwoHundredSchemasInEveryModeValidate) {
  engine::EngineOptions eo;
  eo.threads = 2;
  eo.logger = Logger::Silent();
  auto engine = engine::Engine::Load(eo);
  const auto& tok = engine->tokenizer();
  const int32_t think_end = tok.special().think_end.value_or(-1);
  const std::string out_path = ::testing::TempDir() + "/structured_outputs.jsonl";
  std::ofstream out(out_path);
  std::mt19937 rng(2024);
  const std::vector<std::string> asks = {
      "Write these drone orders as JSON: drone 4 to Mill Road with 3 boxes",
      "What is the capital of France?", "Give me a JSON answer for the weather in Oslo",
      "Turn these orders into a JSON array: drone 2 to Church Lane with 1 box"};
  int runs = 0, same = 0, compared = 0;
  int64_t tokens_c = 0, passes_c = 0, tokens_u = 0, passes_u = 0;
  for (int i = 0; i < 200; ++i) {
    const Json schema = Schema(rng);
    const bool think = i % 10 == 9;
    const Json messages = Json::array({{{"role", "user"}, {"content", asks[i % asks.size()]}}});
    const auto cp = engine->EncodeChat(messages, Json::array(), {{"enable_thinking", think}});
    decode::DecodeParams base = engine->DefaultDecodeParams();
    base.max_tokens = 400;
    base.think_open = cp.think_open;
    base.grammar = engine->CompileGrammar(grammar::JsonSchemaToGbnf(schema), cp.think_open);
    std::vector<int32_t> ar_out;
    for (decode::Mode mode : {decode::Mode::kAr, decode::Mode::kSpec, decode::Mode::kDiffusion}) {
      decode::DecodeParams p = base;
      p.mode = mode;
      auto state = engine->NewState(1024);
      decode::Generation g = engine::RunGeneration(*engine, *state, cp.tokens, p, nullptr);
      std::vector<int32_t> ids = g.output();
      if (mode == decode::Mode::kAr) ar_out = ids;
      if (mode == decode::Mode::kSpec) {
        ++compared;
        same += ids == ar_out;
        EXPECT_EQ(ids, ar_out) << "spec differs from constrained AR on schema " << schema.dump();
      }
      if (mode == decode::Mode::kDiffusion) {
        tokens_c += g.stats().generated;
        passes_c += g.stats().forward_passes();
      }
      // The JSON is what follows the reasoning.
      auto end = std::find(ids.begin(), ids.end(), think_end);
      std::string text =
          tok.Decode(std::vector<int32_t>(end == ids.end() ? ids.begin() : end + 1, ids.end()));
      text.erase(0, text.find_first_not_of(" \n"));
      out << Json{{"schema", schema},
                  {"mode", decode::ModeName(mode)},
                  {"finish", decode::FinishReasonName(g.finish_reason())},
                  {"text", text}}
                 .dump()
          << "\n";
      ++runs;
    }
    // Unconstrained diffusion on every fourth prompt, for tokens per pass.
    if (i % 4 == 0) {
      decode::DecodeParams p = base;
      p.mode = decode::Mode::kDiffusion;
      p.grammar = nullptr;
      p.max_tokens = 64;
      auto state = engine->NewState(1024);
      decode::Generation g = engine::RunGeneration(*engine, *state, cp.tokens, p, nullptr);
      tokens_u += g.stats().generated;
      passes_u += g.stats().forward_passes();
    }
  }
  out.close();
  std::printf(
      "structured: %d runs, spec == ar %d/%d; diffusion tokens per pass: constrained %.2f "
      "(%lld tokens), unconstrained %.2f (%lld tokens)\n",
      runs, same, compared,
      passes_c ? static_cast<double>(tokens_c) / static_cast<double>(passes_c) : 0.0,
      static_cast<long long>(tokens_c),
      passes_u ? static_cast<double>(tokens_u) / static_cast<double>(passes_u) : 0.0,
      static_cast<long long>(tokens_u));
  const std::string cmd = "/usr/bin/python3 '" CROSSWORD_SOURCE_DIR
                          "/tests/structured/validate.py' '" +
                          out_path + "' 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string log;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) log.append(buf, n);
  const int rc = ::pclose(p);
  std::printf("%s", log.c_str());
  EXPECT_EQ(rc, 0) << log;
}

// The tool-call grammar on texts: declared names only, parameters in order with required ones,
// plain-text strings and JSON values per schema, free text before calls only with `auto`.
TEST(ToolCallGrammar, AcceptsExactlyValidCalls) {
  const Json tools = Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]},
                     "days": {"type": "integer", "minimum": 1, "maximum": 7},
                     "when": {"type": "string", "format": "date"}},
      "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time"}}])");
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  auto vocab = std::make_shared<const grammar::TokenVocabulary>(
      std::move(bytes), std::span<const int32_t>(), std::span<const int32_t>());
  auto accepts = [&](engine::ToolGrammarMode mode, const std::string& name, bool parallel,
                     const std::string& text) {
    grammar::GrammarLimits limits;
    limits.max_text_bytes = 4 << 20;
    limits.max_nesting = 256;
    auto g = std::make_shared<const grammar::CompiledGrammar>(
        grammar::CompileGrammar(
            grammar::ParseGbnf(engine::ToolCallGbnf(tools, mode, name, parallel), limits), limits),
        vocab);
    grammar::Matcher m(g);
    return m.AcceptBytes(text) && m.CanEnd();
  };
  const std::string call =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\nNY\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
  const std::string time = "<tool_call>\n<function=get_time>\n</function>\n</tool_call>";
  using M = engine::ToolGrammarMode;
  EXPECT_TRUE(accepts(M::kRequired, "", true, call));
  EXPECT_TRUE(accepts(M::kRequired, "", true, call + "\n" + time));
  EXPECT_FALSE(accepts(M::kRequired, "", false, call + "\n" + time));  // one call only
  EXPECT_FALSE(accepts(M::kRequired, "get_time", true, call));         // named: that one only
  EXPECT_FALSE(accepts(M::kRequired, "", true, "Sure. " + call));      // no text when required
  EXPECT_TRUE(accepts(M::kAuto, "", true, "Let me check.\n\n" + call));
  EXPECT_TRUE(accepts(M::kAuto, "", true, "No tool needed: <tool_cal> is fine."));
  EXPECT_FALSE(accepts(M::kAuto, "", true,
                       "<tool_call>\n<function=get_mood>\n</function>\n"
                       "</tool_call>"));  // undeclared function
  EXPECT_FALSE(accepts(M::kRequired, "", true,
                       "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n"
                       "</parameter>\n</function>\n</tool_call>"));  // city is required
  EXPECT_FALSE(accepts(M::kRequired, "", true,
                       "<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</parameter>"
                       "\n<parameter=days>\n9\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_TRUE(accepts(M::kRequired, "", true,
                      "<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</parameter>\n"
                      "<parameter=unit>\nF\n</parameter>\n<parameter=when>\n2026-02-28\n"
                      "</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(accepts(M::kRequired, "", true,
                       "<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</parameter>\n"
                       "<parameter=unit>\nK\n</parameter>\n</function>\n</tool_call>"));
  // After the server's forced openings.
  EXPECT_TRUE(accepts(M::kAfterFunctionOpen, "", true, call.substr(22)));
  EXPECT_TRUE(accepts(M::kAfterNamedOpen, "get_weather", false, call.substr(35)));
  EXPECT_FALSE(accepts(M::kAfterNamedOpen, "get_weather", false, time.substr(22)));
}

// The tiny model's held-out JSON questions (drone orders) in diffusion mode, unconstrained and
// under the orders' schema (flexible whitespace: the model writes {"drone": 7, ...}): tokens per
// pass of both on the same prompts, and how many answers each gets right.
TEST(StructuredOutput, ConstrainedDiffusionTokensPerPass) {
  engine::EngineOptions eo;
  eo.threads = 2;
  eo.logger = Logger::Silent();
  auto engine = engine::Engine::Load(eo);
  const Json schema = Json::parse(R"({"type": "array", "minItems": 1, "items": {
      "type": "object", "additionalProperties": false, "required": ["drone", "to", "boxes"],
      "properties": {"drone": {"type": "integer", "minimum": 1, "maximum": 9},
                     "to": {"type": "string", "maxLength": 40},
                     "boxes": {"type": "integer", "minimum": 1, "maximum": 9}}}})");
  grammar::JsonSchemaOptions o;
  o.whitespace = grammar::JsonSchemaOptions::Whitespace::kFlexible;
  std::ifstream in(CROSSWORD_SOURCE_DIR "/tests/golden/clover_tiny_heldout.jsonl");
  std::string line;
  int n = 0, right_u = 0, right_c = 0;
  int64_t tokens[2] = {0, 0}, passes[2] = {0, 0};
  while (std::getline(in, line)) {
    const Json q = Json::parse(line);
    if (q["kind"] != "json") continue;
    const std::vector<int32_t> prompt =
        engine->tokenizer().Encode(q["prompt"].get<std::string>(), true);
    for (int c = 0; c < 2; ++c) {
      decode::DecodeParams p = engine->DefaultDecodeParams();
      p.mode = decode::Mode::kDiffusion;
      p.max_tokens = 160;
      p.think_open = engine->ThinkOpen(prompt);
      if (c) p.grammar = engine->CompileGrammar(grammar::JsonSchemaToGbnf(schema, o), p.think_open);
      auto state = engine->NewState(1024);
      decode::Generation g = engine::RunGeneration(*engine, *state, prompt, p, nullptr);
      tokens[c] += g.stats().generated;
      passes[c] += g.stats().forward_passes();
      const std::string text = engine->tokenizer().Decode(g.output());
      const bool right = text.find(q["expected"].get<std::string>()) != std::string::npos;
      (c ? right_c : right_u) += right;
    }
    ++n;
  }
  ASSERT_EQ(n, 10);
  const double tpf_u = static_cast<double>(tokens[0]) / static_cast<double>(passes[0]);
  const double tpf_c = static_cast<double>(tokens[1]) / static_cast<double>(passes[1]);
  std::printf(
      "structured: held-out JSON questions in diffusion (tau %.2f): unconstrained %.2f "
      "tokens per pass (%d/%d right), constrained %.2f tokens per pass (%d/%d right)\n",
      engine->DefaultDecodeParams().threshold, tpf_u, right_u, n, tpf_c, right_c, n);
  EXPECT_GT(tpf_c, 1.0);  // forced stretches and confident runs commit several slots a pass
  EXPECT_GE(right_c, right_u - 2);  // the grammar does not make this model worse
}

}  // namespace
}  // namespace crossword
