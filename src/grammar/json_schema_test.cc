// JSON Schema -> grammar: canonical text, number bounds against arithmetic, patterns, formats,
// objects and arrays, and the errors (unsupported keywords by name, size and depth limits).
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "grammar/matcher.h"

namespace crossword::grammar {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const TokenVocabulary> Bytes() {
  static const auto v = [] {
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
    return std::make_shared<const TokenVocabulary>(std::move(t), std::span<const int32_t>(),
                                                   std::span<const int32_t>());
  }();
  return v;
}

std::shared_ptr<const CompiledGrammar> Compile(const std::string& schema,
                                               JsonSchemaOptions o = {}) {
  GrammarLimits limits;
  limits.max_text_bytes = 4 << 20;
  limits.max_nesting = 256;
  return std::make_shared<const CompiledGrammar>(
      CompileGrammar(ParseGbnf(JsonSchemaToGbnf(std::string_view(schema), o), limits), limits),
      Bytes());
}

bool Accepts(const std::shared_ptr<const CompiledGrammar>& g, std::string_view text) {
  Matcher m(g);
  return m.AcceptBytes(text) && m.CanEnd();
}

ErrorKind KindOf(const std::string& schema, std::string* msg = nullptr) {
  try {
    Compile(schema);
  } catch (const GrammarError& e) {
    if (msg) *msg = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "no error for " << schema;
  return ErrorKind::kSyntax;
}

TEST(CanonicalJson, WritesWhatJsonStringifyWrites) {
  EXPECT_EQ(CanonicalJson(Json::parse(R"({"b": [1, 2.5, 1.0, -0.0, 1e21, 1e-7, 0.000001],
      "a": "q\"\\\n\u0001é", "c": null, "d": true})")),
            "{\"b\":[1,2.5,1,0,1000000000000000000000,1e-7,0.000001],\"a\":"
            "\"q\\\"\\\\\\n\\u0001é\",\"c\":null,"
            "\"d\":true}");
  EXPECT_EQ(CanonicalJson(Json(123456789012345678.0)), "123456789012345680");
  EXPECT_EQ(CanonicalJson(Json(1.5e300)), "15" + std::string(299, '0'));
  EXPECT_EQ(CanonicalJson(Json(1.25e-300)), "1.25e-300");
  EXPECT_EQ(CanonicalJson(Json(-2.5e-10)), "-2.5e-10");
}

// Every bound/number pair: the grammar agrees with arithmetic.
TEST(JsonSchemaNumbers, BoundsAgreeWithArithmetic) {
  const std::vector<std::string> bounds = {"-12.5", "-3",  "-1", "-0.05", "0",  "0.25", "0.5",
                                           "1",     "1.1", "2",  "9.99",  "10", "99",   "100.001"};
  std::vector<std::string> numbers;
  std::mt19937 rng(3);
  for (int i = 0; i < 300; ++i) {
    const int ip = static_cast<int>(rng() % 120);
    std::string s = (rng() % 3 == 0 ? "-" : "") + std::to_string(ip);
    if (rng() % 2) {
      s += ".";
      const int digits = 1 + static_cast<int>(rng() % 3);
      for (int d = 0; d < digits; ++d) s.push_back(static_cast<char>('0' + rng() % 10));
    }
    numbers.push_back(s);
  }
  for (const std::string& b : bounds) {
    numbers.push_back(b);
    if (b.find('.') != std::string::npos) numbers.push_back(b + "0");
    numbers.push_back(b[0] == '-' ? b.substr(1) : "-" + b);
  }
  const double eps = 0;
  int checked = 0;
  for (const char* type : {"number", "integer"}) {
    for (const std::string& lo : bounds) {
      for (const std::string& hi : bounds) {
        for (int ex = 0; ex < 4; ++ex) {
          if ((ex + checked) % 3 != 0 && std::string(type) == "integer") continue;  // fewer
          const std::string schema = fmt::format(R"({{"type": "{}", "{}": {}, "{}": {}}})", type,
                                                 ex & 1 ? "exclusiveMinimum" : "minimum", lo,
                                                 ex & 2 ? "exclusiveMaximum" : "maximum", hi);
          std::shared_ptr<const CompiledGrammar> g;
          try {
            g = Compile(schema);
          } catch (const GrammarError& e) {
            ASSERT_EQ(e.kind(), ErrorKind::kEmpty) << schema << ": " << e.what();
          }
          const double l = std::stod(lo), h = std::stod(hi);
          for (const std::string& n : numbers) {
            const double x = std::stod(n);
            const bool is_int = n.find('.') == std::string::npos;
            bool want = (ex & 1 ? x > l + eps : x >= l) && (ex & 2 ? x < h : x <= h);
            if (std::string(type) == "integer") want = want && is_int;
            if (n == "-0" || n.rfind("-0.", 0) == 0) continue;  // sign of zero: either way
            const bool got = g && Accepts(g, n);
            ASSERT_EQ(got, want) << schema << " on " << n;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 50000);
}

TEST(JsonSchemaStrings, LengthsPatternsAndFormats) {
  auto g = Compile(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(Accepts(g, "\"a\""));
  EXPECT_TRUE(Accepts(g, "\"a😀\""));  // code points, not bytes
  EXPECT_TRUE(Accepts(g, "\"\\n\\\"x\""));
  EXPECT_FALSE(Accepts(g, "\"abcd\""));
  EXPECT_FALSE(Accepts(g, "\"a\nb\""));  // raw control characters are not JSON
  g = Compile(R"({"type": "string", "pattern": "^[a-c]+\\d{2}(x|yz)?$"})");
  EXPECT_TRUE(Accepts(g, "\"abc12yz\""));
  EXPECT_FALSE(Accepts(g, "\"abc12y\""));
  EXPECT_FALSE(Accepts(g, "\"zabc12\""));
  g = Compile(R"({"type": "string", "pattern": "q\"u"})");  // unanchored, quote escaped in JSON
  EXPECT_TRUE(Accepts(g, "\"xxq\\\"uyy\""));
  EXPECT_FALSE(Accepts(g, "\"q\\\"\""));
  g = Compile(R"({"type": "string", "format": "date-time"})");
  EXPECT_TRUE(Accepts(g, "\"2024-02-29T23:59:60.5+05:30\""));
  EXPECT_FALSE(Accepts(g, "\"2024-02-30T00:00:00Z\""));
  EXPECT_FALSE(Accepts(g, "\"2024-04-31T00:00:00Z\""));
  g = Compile(R"({"format": "uuid"})");  // no type: other types stay valid
  EXPECT_TRUE(Accepts(g, "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_FALSE(Accepts(g, "\"123e4567\""));
  EXPECT_TRUE(Accepts(g, "42"));
}

TEST(JsonSchemaObjects, OrderRequiredAdditionalAndCounts) {
  auto g = Compile(R"({"type": "object", "properties": {"a": {"type": "integer"},
      "b": {"type": "string"}}, "required": ["b"], "additionalProperties": false})");
  EXPECT_TRUE(Accepts(g, R"({"b":"x"})"));
  EXPECT_TRUE(Accepts(g, R"({"a":1,"b":"x"})"));
  EXPECT_FALSE(Accepts(g, R"({"a":1})"));
  EXPECT_FALSE(Accepts(g, R"({"b":"x","c":1})"));
  EXPECT_FALSE(Accepts(g, R"({"b":"x",})"));
  g = Compile(R"({"properties": {"ab": {"const": 1}}, "additionalProperties": {"type": "boolean"},
      "minProperties": 2})");
  EXPECT_TRUE(Accepts(g, R"({"ab":1,"a":true})"));
  EXPECT_TRUE(Accepts(g, R"({"abc":true,"a":false})"));
  EXPECT_FALSE(Accepts(g, R"({"ab":1})"));
  EXPECT_FALSE(Accepts(g, R"({"ab":true,"x":true})"));  // "ab" is declared: not additional
  EXPECT_TRUE(Accepts(g, "[]"));                        // no type: arrays are valid
  g = Compile(R"({"type": "object", "maxProperties": 1})");
  EXPECT_TRUE(Accepts(g, R"({"x":[1,{"y":null}]})"));
  EXPECT_FALSE(Accepts(g, R"({"x":1,"y":2})"));
}

TEST(JsonSchemaArrays, TuplesAndCounts) {
  auto g = Compile(R"({"prefixItems": [{"type": "integer"}, {"type": "string"}],
      "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3, "type": "array"})");
  EXPECT_FALSE(Accepts(g, "[]"));
  EXPECT_TRUE(Accepts(g, "[1]"));
  EXPECT_TRUE(Accepts(g, "[1,\"a\",true]"));
  EXPECT_FALSE(Accepts(g, "[1,\"a\",true,false]"));
  EXPECT_FALSE(Accepts(g, "[\"a\"]"));
  g = Compile(R"({"type": "array", "items": [{"type": "null"}], "additionalItems": false})");
  EXPECT_TRUE(Accepts(g, "[null]"));
  EXPECT_FALSE(Accepts(g, "[null,null]"));
}

TEST(JsonSchemaCombinators, AnyOneAllOfAndRefs) {
  auto g = Compile(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
      "required": ["v", "next"], "additionalProperties": false}}, "$ref": "#/$defs/node"})");
  EXPECT_TRUE(Accepts(g, R"({"v":1,"next":{"v":2,"next":null}})"));
  EXPECT_FALSE(Accepts(g, R"({"v":1,"next":{"v":2}})"));
  g = Compile(R"({"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
      {"properties": {"a": {"minimum": 3}}}], "type": "object"})");
  EXPECT_TRUE(Accepts(g, R"({"a":3})"));
  EXPECT_FALSE(Accepts(g, R"({"a":2})"));
  g = Compile(R"({"oneOf": [{"type": "string"}, {"type": "integer"}]})");
  EXPECT_TRUE(Accepts(g, "\"x\""));
  EXPECT_FALSE(Accepts(g, "1.5"));
  g = Compile(R"({"enum": [1, "a", 2.0, {"k": [true]}], "type": ["integer", "object"]})");
  EXPECT_TRUE(Accepts(g, "2"));
  EXPECT_TRUE(Accepts(g, R"({"k":[true]})"));
  EXPECT_FALSE(Accepts(g, "\"a\""));
  g = Compile(R"({"enum": ["ab", "abcd", 7], "maxLength": 3})");  // filtered by compiling the rest
  EXPECT_TRUE(Accepts(g, "\"ab\""));
  EXPECT_FALSE(Accepts(g, "\"abcd\""));
  EXPECT_TRUE(Accepts(g, "7"));
  g = Compile(R"({"type": "object", "nullable": true})");
  EXPECT_TRUE(Accepts(g, "null"));
}

TEST(JsonSchemaWhitespace, CompactByDefaultFlexibleOnRequest) {
  const std::string schema = R"({"type": "object", "properties": {"a": {"type": "array"}}})";
  EXPECT_FALSE(Accepts(Compile(schema), R"({ "a": [1, 2] })"));
  JsonSchemaOptions o;
  o.whitespace = JsonSchemaOptions::Whitespace::kFlexible;
  EXPECT_TRUE(Accepts(Compile(schema, o), "{ \"a\" : [ 1 ,\n 2 ] }"));
}

TEST(JsonSchemaErrors, UnsupportedKeywordsAreNamed) {
  std::string msg;
  EXPECT_EQ(KindOf(R"({"type": "object", "properties": {"x": {"not": {"type": "null"}}}})", &msg),
            ErrorKind::kUnsupported);
  EXPECT_NE(msg.find("'not'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("#/properties/x"), std::string::npos) << msg;
  EXPECT_EQ(KindOf(R"({"type": "array", "uniqueItems": true})", &msg), ErrorKind::kUnsupported);
  EXPECT_NE(msg.find("uniqueItems"), std::string::npos) << msg;
  EXPECT_EQ(KindOf(R"({"format": "ipv6"})", &msg), ErrorKind::kUnsupported);
  EXPECT_NE(msg.find("ipv6"), std::string::npos) << msg;
  EXPECT_EQ(KindOf(R"({"oneOf": [{"type": "integer"}, {"minimum": 2}]})", &msg),
            ErrorKind::kUnsupported);
  EXPECT_EQ(KindOf("{\"pattern\": \"(?=a)\"}", &msg), ErrorKind::kUnsupported);
  EXPECT_EQ(KindOf(R"({"$ref": "http://example.com/s.json"})", &msg), ErrorKind::kUnsupported);
  EXPECT_EQ(KindOf(R"({"x-custom": 1})", &msg), ErrorKind::kUnsupported);
  EXPECT_NE(msg.find("'x-custom'"), std::string::npos) << msg;
}

TEST(JsonSchemaErrors, EmptyMalformedLargeAndDeep) {
  EXPECT_EQ(KindOf(R"({"type": "integer", "minimum": 5, "maximum": 3})"), ErrorKind::kEmpty);
  EXPECT_EQ(KindOf("false"), ErrorKind::kEmpty);
  EXPECT_EQ(KindOf(R"({"type": "object", "required": ["a"], "additionalProperties": false})"),
            ErrorKind::kEmpty);
  EXPECT_EQ(KindOf(R"({"type": )"), ErrorKind::kSyntax);
  // Counts at or above 2^64 (no uint64_t value: the request fuzzer's maxLength 2e35) saturate,
  // so the limits refuse them, and a huge maxItems is no bound.
  std::string msg;
  EXPECT_EQ(KindOf(R"({"type": "string", "maxLength": 2e35})", &msg), ErrorKind::kTooLarge);
  EXPECT_NE(msg.find("maxLength"), std::string::npos) << msg;
  EXPECT_EQ(KindOf(R"({"type": "string", "minLength": 1e300})"), ErrorKind::kTooLarge);
  EXPECT_EQ(KindOf(R"({"type": "array", "minItems": 18446744073709551616})"), ErrorKind::kTooLarge);
  EXPECT_EQ(KindOf(R"({"type": "object", "maxProperties": 1e30})"), ErrorKind::kUnsupported);
  EXPECT_NO_THROW(JsonSchemaToGbnf(Json::parse(R"({"type": "array", "maxItems": 1e30})")));
  // 1 MB of schema: refused on its size before parsing.
  std::string big = R"({"enum": [")" + std::string(1 << 20, 'a') + R"("]})";
  EXPECT_EQ(KindOf(big), ErrorKind::kTooLarge);
  // 100,000 levels: refused before any recursion.
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += R"({"items":)";
  deep += "{}" + std::string(100000, '}');
  EXPECT_EQ(KindOf(deep), ErrorKind::kTooLarge);
  // Same for an already parsed document (built without recursion here).
  Json doc = Json::object();
  Json* cur = &doc;
  for (int i = 0; i < 1000; ++i) cur = &((*cur)["items"] = Json::object());
  EXPECT_THROW(JsonSchemaToGbnf(doc), GrammarError);
}

}  // namespace
}  // namespace crossword::grammar
