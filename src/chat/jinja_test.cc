// Unit tests of the Jinja2 interpreter: the template cases users of this model family hit (with
// hand-checked expected values), error reporting, and limits on hostile templates and inputs.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "chat/template.h"

namespace crossword::chat {
namespace {

using Json = nlohmann::ordered_json;

std::string R(const std::string& src, const Json& ctx = Json::object()) {
  return Template::Parse(src).Render(ctx);
}

TEST(Jinja, ReverseSliceAndNamespaceInLoopFindLastUserQuery) {
  // The Qwen3 template's idiom: walk messages[::-1], record the last real user turn in a
  // namespace (a plain `set` inside a loop would not survive the iteration).
  const std::string src =
      "{%- set ns = namespace(last=-1) -%}"
      "{%- for m in messages[::-1] -%}"
      "{%- set idx = (messages|length - 1) - loop.index0 -%}"
      "{%- if ns.last < 0 and m.role == 'user' and not m.content.startswith('<tool_response>') -%}"
      "{%- set ns.last = idx -%}{%- endif -%}{%- set plain = idx -%}"
      "{%- endfor -%}{{ ns.last }}|{{ plain is defined }}";
  Json ctx = {
      {"messages", Json::parse(R"([{"role":"user","content":"a"},{"role":"assistant","content":"b"},
                               {"role":"user","content":"c"},
                               {"role":"user","content":"<tool_response>x</tool_response>"}])")}};
  EXPECT_EQ(R(src, ctx), "2|False");
}

TEST(Jinja, LoopPrevAndNextItem) {
  EXPECT_EQ(
      R("{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }};{% endfor %}"),
      "<1>2;1<2>3;2<3>;");
  EXPECT_EQ(R("{% for x in 'ab' %}{{ loop.previtem is defined }}{% endfor %}"), "FalseTrue");
}

TEST(Jinja, PythonPrintingOfBooleansAndNone) {
  EXPECT_EQ(R("{{ true }} {{ false }} {{ none }}"), "True False None");
  EXPECT_EQ(R("{{ true|string }}{{ false|string }}{{ none|string }}"), "TrueFalseNone");
  EXPECT_EQ(R("{{ x }}", {{"x", Json::parse("[true, null, 1.0, \"s\"]")}}),
            "[True, None, 1.0, 's']");
}

TEST(Jinja, TojsonMatchesHuggingFace) {
  Json ctx = {{"d", Json::parse(R"({"zeta": "é😊", "alpha": [1, 2.5, null, true], "m": {}})")}};
  // Key order kept, non-ASCII raw, ", " and ": " separators.
  EXPECT_EQ(R("{{ d|tojson }}", ctx), R"({"zeta": "é😊", "alpha": [1, 2.5, null, true], "m": {}})");
  EXPECT_EQ(R("{{ d|tojson(ensure_ascii=true) }}", ctx),
            R"({"zeta": "\u00e9\ud83d\ude0a", "alpha": [1, 2.5, null, true], "m": {}})");
  EXPECT_EQ(R("{{ d.alpha|tojson(indent=2) }}", ctx), "[\n  1,\n  2.5,\n  null,\n  true\n]");
  EXPECT_EQ(R("{{ d|tojson(sort_keys=true, separators=(',', ':')) }}", ctx),
            R"({"alpha":[1,2.5,null,true],"m":{},"zeta":"é😊"})");
}

TEST(Jinja, RaiseExceptionIsADistinctType) {
  try {
    R("{% if not messages %}{{ raise_exception('No messages provided.') }}{% endif %}",
      {{"messages", Json::array()}});
    FAIL() << "expected TemplateException";
  } catch (const TemplateException& e) {
    EXPECT_STREQ(e.what(), "No messages provided.");
  }
  // Other failures are TemplateError, not TemplateException.
  EXPECT_THROW(R("{{ 'a' + 1 }}"), TemplateError);
}

TEST(Jinja, SyntaxErrorsNameLineAndColumn) {
  try {
    Template::Parse("line one\n{% if x %}\n  {{ 1 + }}\n{% endif %}");
    FAIL() << "expected TemplateError";
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  }
  try {
    Template::Parse("ok\n\n{% include 'x.jinja' %}");
    FAIL() << "expected TemplateError";
  } catch (const TemplateError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("line 3"), std::string::npos) << what;
    EXPECT_NE(what.find("include"), std::string::npos) << what;
  }
  EXPECT_THROW(Template::Parse("{% for x in y recursive %}{% endfor %}"), TemplateError);
  EXPECT_THROW(Template::Parse("{% if x %}never closed"), TemplateError);
}

TEST(Jinja, RuntimeErrorsNameTheLine) {
  try {
    R("a\nb\n{{ missing.attr }}");
    FAIL();
  } catch (const TemplateError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("line 3"), std::string::npos) << what;
    EXPECT_NE(what.find("'missing' is undefined"), std::string::npos) << what;
  }
}

TEST(Jinja, HostileTemplatesHitLimitsInsteadOfHanging) {
  RenderLimits limits;
  limits.max_steps = 100000;
  limits.max_string_bytes = 1 << 20;
  limits.max_output_bytes = 1 << 20;
  auto render = [&](const std::string& src) {
    return Template::Parse(src).Render(Json::object(), limits);
  };
  EXPECT_THROW(
      render("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"),
      TemplateError);
  EXPECT_THROW(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), TemplateError);
  EXPECT_THROW(render("{{ 'x' * 10000000000 }}"), TemplateError);
  EXPECT_THROW(render("{{ range(10000000) }}"), TemplateError);
  EXPECT_THROW(render("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s "
                      "~ ns.s %}{% endfor %}"),
               TemplateError);
  EXPECT_THROW(render("{% set ns = namespace(l=[1]) %}{% for i in range(1000) %}{% set ns.l = "
                      "[ns.l] %}{% endfor %}"),
               TemplateError);
  // A namespace that contains itself prints up to the nesting limit, then fails cleanly.
  EXPECT_THROW(render("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}"), TemplateError);
  // Deep nesting in the source is a syntax error, not a stack overflow.
  EXPECT_THROW(
      Template::Parse("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}"),
      TemplateError);
  EXPECT_THROW(Template::Parse("{{ " + std::string(20000, '[') + " }}"), TemplateError);
}

TEST(Jinja, HostileInputsAreRejectedCleanly) {
  Template t = Template::Parse("{{ messages|tojson }}");
  Json deep = Json::array();
  Json* cur = &deep;
  for (int i = 0; i < 5000; ++i) {
    cur->push_back(Json::array());
    cur = &(*cur)[0];
  }
  EXPECT_THROW(t.Render({{"messages", deep}}), TemplateError);
  EXPECT_THROW(t.Render(Json::array()), TemplateError);  // context must be an object
}

TEST(Jinja, RenderIsRepeatableAndConst) {
  const Template t = Template::Parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}"
      "{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}");
  Json ctx = {{"messages", Json::array({1, 2, 3})}};
  EXPECT_EQ(t.Render(ctx), "3");
  EXPECT_EQ(t.Render(ctx), "3");
}

TEST(Jinja, FloatReprFollowsPython) {
  EXPECT_EQ(jinja::PyFloatRepr(1e16), "1e+16");
  EXPECT_EQ(jinja::PyFloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(jinja::PyFloatRepr(0.0001), "0.0001");
  EXPECT_EQ(jinja::PyFloatRepr(0.00001), "1e-05");
  EXPECT_EQ(jinja::PyFloatRepr(-0.0), "-0.0");
  EXPECT_EQ(jinja::PyFloatRepr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(jinja::PyFloatRepr(1.5e300), "1.5e+300");
}

TEST(Jinja, MakeChatContextMergesKwargs) {
  Json ctx = MakeChatContext(Json::parse(R"([{"role":"user","content":"x"}])"), Json(), true, "",
                             "<|im_end|>", Json{{"enable_thinking", false}});
  EXPECT_FALSE(ctx.contains("tools"));
  EXPECT_EQ(ctx["add_generation_prompt"], true);
  EXPECT_EQ(ctx["enable_thinking"], false);
  EXPECT_EQ(ctx["eos_token"], "<|im_end|>");
}

// Our template: the generation prompt with thinking on and off, and validation errors.
std::string OurTemplate() {
  std::ifstream in(std::string(CROSSWORD_SOURCE_DIR) + "/assets/chat_template.jinja");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ChatTemplateAsset, GenerationPrompts) {
  Template t = Template::Parse(OurTemplate());
  Json messages = Json::parse(R"([{"role":"user","content":"Hi"}])");
  EXPECT_EQ(t.Render(MakeChatContext(messages, Json(), true, "", "", Json::object())),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  EXPECT_EQ(t.Render(MakeChatContext(messages, Json(), true, "", "", {{"enable_thinking", false}})),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplateAsset, ToolCallRendering) {
  Template t = Template::Parse(OurTemplate());
  Json messages = Json::parse(R"([
    {"role":"user","content":"Weather?"},
    {"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"w",
      "arguments":{"city":"Paris","days":3,"opts":{"unit":"c"}}}}]},
    {"role":"tool","content":"sunny"},{"role":"tool","content":"warm"}])");
  std::string out = t.Render(MakeChatContext(messages, Json(), false, "", "", Json::object()));
  EXPECT_NE(out.find("<tool_call>\n<function=w>\n<parameter=city>\nParis\n</parameter>\n"
                     "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"unit\": \"c\"}\n"
                     "</parameter>\n</function>\n</tool_call><|im_end|>\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n"
                     "warm\n</tool_response><|im_end|>\n"),
            std::string::npos)
      << out;
}

TEST(ChatTemplateAsset, ReasoningKeptOnlyAfterTheLastUserQuery) {
  Template t = Template::Parse(OurTemplate());
  Json messages = Json::parse(R"([
    {"role":"user","content":"q1"},
    {"role":"assistant","content":"a1","reasoning_content":"old thought"},
    {"role":"user","content":"q2"},
    {"role":"assistant","content":"","reasoning_content":"call it","tool_calls":[
      {"type":"function","function":{"name":"t","arguments":{}}}]},
    {"role":"tool","content":"r1"}])");
  EXPECT_EQ(t.Render(MakeChatContext(messages, Json(), true, "", "", Json::object())),
            "<|im_start|>user\nq1<|im_end|>\n"
            "<|im_start|>assistant\na1<|im_end|>\n"
            "<|im_start|>user\nq2<|im_end|>\n"
            "<|im_start|>assistant\n<think>\ncall it\n</think>\n\n"
            "<tool_call>\n<function=t>\n</function>\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nr1\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n<think>\n");
}

TEST(ChatTemplateAsset, MutatedTemplatesNeverCrash) {
  // Random edits of a real template must parse and render or fail with TemplateError /
  // TemplateException, never crash or hang (run under ASan by `make test-asan`).
  const std::string base = OurTemplate();
  Json ctx =
      MakeChatContext(Json::parse(R"([{"role":"system","content":"s"},{"role":"user","content":"u"},
        {"role":"assistant","content":"a","reasoning_content":"r","tool_calls":[{"function":
        {"name":"f","arguments":{"x":1,"y":"z"}}}]},{"role":"tool","content":"t"}])"),
                      Json::parse(R"([{"type":"function","function":{"name":"f"}}])"), true, "", "",
                      Json::object());
  RenderLimits limits;
  limits.max_steps = 200000;
  std::mt19937 rng(7);
  const std::string alphabet = "{}%#-+()[]|.,:'\"=~<>!*/ \n\tabcdefghijklmnopqrstuvwxyz0123456789_";
  int rendered = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    std::string src = base;
    for (int edits = 1 + rng() % 4; edits > 0; --edits) {
      size_t pos = rng() % src.size();
      switch (rng() % 3) {
        case 0:
          src.erase(pos, 1 + rng() % 8);
          break;
        case 1:
          src.insert(pos, 1, alphabet[rng() % alphabet.size()]);
          break;
        default:
          src[pos] = alphabet[rng() % alphabet.size()];
      }
    }
    try {
      Template::Parse(src).Render(ctx, limits);
      ++rendered;
    } catch (const TemplateError&) {
    } catch (const TemplateException&) {
    }
  }
  EXPECT_GT(rendered, 100);  // the edits must not all be rejected at parse time
}

TEST(ChatTemplateAsset, RejectsInvalidConversations) {
  Template t = Template::Parse(OurTemplate());
  EXPECT_THROW(t.Render(MakeChatContext(Json::array(), Json(), true, "", "", Json::object())),
               TemplateException);
  EXPECT_THROW(t.Render(MakeChatContext(Json::parse(R"([{"role":"system","content":"s"}])"), Json(),
                                        true, "", "", Json::object())),
               TemplateException);
}

}  // namespace
}  // namespace crossword::chat
