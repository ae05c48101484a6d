// Request validation: every field the server reads is type- and range-checked here, so that the
// handlers only ever see well-formed requests (docs/server.md lists the fields).
#include "server/api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>

#include "base/json_gate.h"
#include "grammar/json_schema.h"

namespace crossword::server {

using json = nlohmann::ordered_json;

void BadRequest(const std::string& param, const std::string& message) {
  throw ApiError(400, "invalid_request_error", param, message);
}

namespace {

// Anthropic's error types by HTTP status (their API reference's "Errors" page).
const char* AnthropicErrorType(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

}  // namespace

json ErrorJson(const ApiError& e, ErrorShape shape) {
  if (shape == ErrorShape::kAnthropic) {
    return {{"type", "error"},
            {"error", {{"type", AnthropicErrorType(e.status())}, {"message", e.what()}}}};
  }
  json err = {{"message", e.what()}, {"type", e.type()}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param().empty()) err["param"] = e.param();
  if (!e.code().empty()) err["code"] = e.code();
  return {{"error", err}};
}

json ParseBody(std::string_view body) {
  if (body.empty()) BadRequest("", "the request body is empty; send a JSON object");
  // The gate runs before the parser builds anything: no copy, merge or walk below ever sees a
  // document deeper or larger than JsonLimits (issue 24: 40,000 levels overflowed the stack).
  if (auto e = JsonLimitError(body)) BadRequest("", "the request body is " + *e);
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::parse_error& e) {
    // nlohmann rejects ill-formed UTF-8 and unpaired surrogate escapes as parse errors too.
    BadRequest("", "the request body is not valid JSON (UTF-8): " + JsonParserMessage(e.what()));
  } catch (const json::out_of_range& e) {
    // A number beyond double's range (1e999) is a bad request like any other, not a 500.
    BadRequest("", "the request body has a number out of range: " + JsonParserMessage(e.what()));
  }
  if (!j.is_object()) BadRequest("", "the request body must be a JSON object");
  return j;
}

ReasoningFormat ParseReasoningFormat(std::string_view name, const std::string& param) {
  if (name == "deepseek" || name == "auto") return ReasoningFormat::kDeepseek;
  if (name == "none") return ReasoningFormat::kNone;
  BadRequest(param, "'" + param + "' must be \"deepseek\", \"auto\" or \"none\" (got \"" +
                        std::string(name) + "\")");
}

// The field's value, or nullptr when absent or JSON null (OpenAI treats null as absent).
const json* Field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string TypeName(const json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

void WrongType(const std::string& param, const char* want, const json& v) {
  BadRequest(param, "'" + param + "' must be " + want + " (got " + TypeName(v) + ")");
}

double Number(const json& v, const std::string& param, double lo, double hi) {
  if (!v.is_number()) WrongType(param, "a number", v);
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    BadRequest(param, "'" + param + "' must be in [" + json(lo).dump() + ", " + json(hi).dump() +
                          "] (got " + v.dump() + ")");
  }
  return x;
}

float UnitFraction(const json& v, const std::string& param) {
  if (!v.is_number()) WrongType(param, "a number", v);
  const double x = v.get<double>();
  const float f = static_cast<float>(x);
  if (!(x > 0.0 && x <= 1.0)) {
    BadRequest(param, "'" + param + "' must be in (0, 1] (got " + v.dump() + ")");
  }
  if (f <= 0.0f) {
    BadRequest(param, "'" + param + "' is 0 as a 32-bit float (got " + v.dump() +
                          "; the smallest is about 1.4e-45)");
  }
  return f;
}

namespace {
// Integer's checks; `alt` names what else the field takes (appended to both messages).
int64_t IntegerIn(const json& v, const std::string& param, int64_t lo, int64_t hi,
                  const std::string& alt) {
  if (v.is_number_float()) {  // 3.5, or an integer too large for JSON's integers (1e20)
    BadRequest(param, "'" + param + "' must be an integer in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]" + alt + " (got " + v.dump() + ")");
  }
  if (!v.is_number_integer() && !v.is_number_unsigned()) {
    WrongType(param, ("an integer" + alt).c_str(), v);
  }
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    BadRequest(param, "'" + param + "' is too large (got " + v.dump() + ")");
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) {
    BadRequest(param, "'" + param + "' must be in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]" + alt + " (got " + std::to_string(x) + ")");
  }
  return x;
}

// An integer in [lo, hi] or the string "auto" (returned as nullopt).
std::optional<int64_t> IntegerOrAuto(const json& v, const std::string& param, int64_t lo,
                                     int64_t hi) {
  if (v.is_string() && v.get_ref<const std::string&>() == "auto") return std::nullopt;
  if (v.is_string()) {
    BadRequest(param, "'" + param + "' must be an integer in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "] or \"auto\" (got " + v.dump() + ")");
  }
  return IntegerIn(v, param, lo, hi, " or \"auto\"");
}
}  // namespace

int64_t Integer(const json& v, const std::string& param, int64_t lo, int64_t hi) {
  return IntegerIn(v, param, lo, hi, "");
}

bool Bool(const json& v, const std::string& param) {
  if (!v.is_boolean()) WrongType(param, "a boolean", v);
  return v.get<bool>();
}

const std::string& String(const json& v, const std::string& param) {
  if (!v.is_string()) WrongType(param, "a string", v);
  return v.get_ref<const std::string&>();
}

const json& Object(const json& v, const std::string& param) {
  if (!v.is_object()) WrongType(param, "an object", v);
  return v;
}

namespace {

// OpenAI fields crossword accepts and ignores: their types are still checked.
void CheckIgnoredFields(const json& body) {
  static constexpr const char* kStrings[] = {"model", "user", "service_tier"};
  for (const char* f : kStrings) {
    if (const json* v = Field(body, f)) String(*v, f);
  }
  static constexpr const char* kObjects[] = {"metadata", "prediction"};
  for (const char* f : kObjects) {
    if (const json* v = Field(body, f)) Object(*v, f);
  }
  static constexpr const char* kBools[] = {"store"};
  for (const char* f : kBools) {
    if (const json* v = Field(body, f)) Bool(*v, f);
  }
  if (const json* v = Field(body, "modalities"); v && !v->is_array())
    WrongType("modalities", "an array", *v);
}

// A schema's GBNF; a schema outside the subset is a 400 naming the keyword.
std::string SchemaGrammar(const json& schema, const std::string& param) {
  if (!schema.is_object() && !schema.is_boolean()) WrongType(param, "an object", schema);
  try {
    return grammar::JsonSchemaToGbnf(schema);
  } catch (const grammar::GrammarError& e) {
    BadRequest(param, e.what());
  }
}

// response_format (OpenAI), json_schema and grammar (llama-server): at most one of them.
void ParseStructuredFields(const json& body, GenerationRequest& r) {
  const json* rf = Field(body, "response_format");
  std::string rf_type = "text";
  if (rf) {
    const json* type = Field(Object(*rf, "response_format"), "type");
    if (!type) BadRequest("response_format.type", "'response_format.type' is required");
    rf_type = String(*type, "response_format.type");
  }
  const json* js = Field(body, "json_schema");
  const json* gr = Field(body, "grammar");
  if ((rf_type != "text") + (js != nullptr) + (gr != nullptr) > 1) {
    BadRequest(gr ? "grammar" : "json_schema",
               "give at most one of response_format (json_object / json_schema), json_schema and "
               "grammar");
  }
  if (rf_type == "json_object") {
    r.grammar_param = "response_format";
    // llama-server also takes a schema here.
    r.grammar = rf->contains("schema") && !(*rf)["schema"].is_null()
                    ? SchemaGrammar((*rf)["schema"], "response_format.schema")
                    : grammar::JsonObjectGbnf();
    r.grammar_generated = true;
  } else if (rf_type == "json_schema") {
    const json* spec = Field(*rf, "json_schema");
    if (!spec)
      BadRequest("response_format.json_schema", "'response_format.json_schema' is required");
    Object(*spec, "response_format.json_schema");
    if (const json* n = Field(*spec, "name")) String(*n, "response_format.json_schema.name");
    // strict or not, the schema is enforced (docs/structured-output.md).
    if (const json* st = Field(*spec, "strict")) Bool(*st, "response_format.json_schema.strict");
    const json* schema = Field(*spec, "schema");
    if (!schema) {
      BadRequest("response_format.json_schema.schema",
                 "'response_format.json_schema.schema' is required");
    }
    r.grammar_param = "response_format.json_schema.schema";
    r.grammar = SchemaGrammar(*schema, r.grammar_param);
    r.grammar_generated = true;
  } else if (rf_type != "text") {
    BadRequest(
        "response_format.type",
        "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\" (got \"" +
            rf_type + "\")");
  }
  if (js) {
    r.grammar_param = "json_schema";
    r.grammar = SchemaGrammar(*js, "json_schema");
    r.grammar_generated = true;
  }
  if (gr) {
    r.grammar_param = "grammar";
    r.grammar = String(*gr, "grammar");
    try {
      grammar::ParseGbnf(r.grammar);  // syntax, undefined rules, limits: a 400 now
    } catch (const grammar::GrammarError& e) {
      BadRequest("grammar", e.what());
    }
  }
}

// Nesting and size of a JSON value from the request, checked without recursion before anything
// recursive (template rendering, schema compilation) touches it.
void CheckDepth(const json& v, const std::string& param) {
  const grammar::JsonSchemaOptions limits;
  std::vector<std::pair<const json*, uint32_t>> stack{{&v, 1}};
  size_t n = 0;
  while (!stack.empty()) {
    auto [x, depth] = stack.back();
    stack.pop_back();
    if (depth > limits.max_depth || ++n > limits.max_schema_nodes) {
      BadRequest(param, "'" + param + "' is nested deeper than " +
                            std::to_string(limits.max_depth) + " levels or has more than " +
                            std::to_string(limits.max_schema_nodes) + " values");
    }
    if (x->is_structured()) {
      for (const json& c : *x) stack.emplace_back(&c, depth + 1);
    }
  }
}

// n_layer: the model's layers, for draft_skip_ffn (0: checked only when the generation starts).
void ApplyDecodingExtension(const json& obj, const std::string& prefix, int n_layer,
                            decode::DecodeParams& p) {
  if (const json* v = Field(obj, "mode")) {
    const std::string& m = String(*v, prefix + "mode");
    try {
      p.mode = decode::ParseMode(m);
    } catch (const Error&) {
      BadRequest(
          prefix + "mode",
          "'" + prefix + "mode' must be \"ar\", \"diffusion\" or \"spec\" (got \"" + m + "\")");
    }
  }
  if (const json* v = Field(obj, "block_size"))
    p.block_size = static_cast<int>(Integer(*v, prefix + "block_size", 2, 256));
  if (const json* v = Field(obj, "threshold")) p.threshold = UnitFraction(*v, prefix + "threshold");
  if (const json* v = Field(obj, "draft_max")) {
    const std::optional<int64_t> n = IntegerOrAuto(*v, prefix + "draft_max", 0, decode::kMaxDraft);
    p.draft_auto = !n;
    if (n) p.draft_max = static_cast<int>(*n);
  }
  if (const json* v = Field(obj, "draft_expert_budget")) {
    if (!v->is_boolean())
      BadRequest(prefix + "draft_expert_budget",
                 "'" + prefix + "draft_expert_budget' must be a boolean");
    p.draft_expert_budget = v->get<bool>();
  }
  if (const json* v = Field(obj, "draft_skip_ffn")) {
    const std::string name = prefix + "draft_skip_ffn";
    if (!v->is_array() || v->size() > 64)
      BadRequest(name, "'" + name + "' must be an array of at most 64 layer numbers in [0, 63]");
    p.draft_skip_ffn = 0;
    for (const json& l : *v) p.draft_skip_ffn |= uint64_t{1} << Integer(l, name, 0, 63);
    // A layer the model's draft passes cannot skip (decode::Generation checks it too).
    if (n_layer > 0 && (p.draft_skip_ffn & ~model::SkippableFfnLayers(n_layer)) != 0) {
      BadRequest(name, "'" + name + "' may name layers 0 .. " + std::to_string(n_layer - 2) +
                           " of this model (the last layer's FFN feeds the head)");
    }
  }
  if (const json* v = Field(obj, "draft_p_min"))
    p.draft_p_min = static_cast<float>(Number(*v, prefix + "draft_p_min", 0.0, 1.0));
  if (const json* v = Field(obj, "verify_chunk")) {
    const std::optional<int64_t> n = IntegerOrAuto(*v, prefix + "verify_chunk", 0, 256);
    p.verify_chunk = n ? static_cast<int>(*n) : decode::kVerifyChunkAuto;
  }
}

}  // namespace

void ParseGenerationFields(const json& body, const RequestDefaults& defaults,
                           GenerationRequest& r) {
  CheckIgnoredFields(body);
  decode::DecodeParams& p = r.params;
  p = defaults.params;
  for (const char* f : {"max_tokens", "max_completion_tokens", "n_predict"}) {
    if (const json* v = Field(body, f)) {
      p.max_tokens = Integer(*v, f, 1, std::numeric_limits<int32_t>::max());
      r.max_tokens_given = true;
    }
  }
  if (!r.max_tokens_given && defaults.n_predict > 0) {
    p.max_tokens = defaults.n_predict;  // serve -n N
    r.max_tokens_given = true;
  }
  if (const json* v = Field(body, "n")) r.n = static_cast<int>(Integer(*v, "n", 1, 128));
  decode::SamplingParams& s = p.sampling;
  if (const json* v = Field(body, "temperature"))
    s.temperature = static_cast<float>(Number(*v, "temperature", 0, 100));
  if (const json* v = Field(body, "top_p")) s.top_p = UnitFraction(*v, "top_p");
  if (const json* v = Field(body, "top_k"))
    s.top_k = static_cast<int>(Integer(*v, "top_k", -1, 1 << 30));
  if (s.top_k < 0) s.top_k = 0;  // llama.cpp: <= 0 means off
  if (const json* v = Field(body, "min_p")) s.min_p = static_cast<float>(Number(*v, "min_p", 0, 1));
  if (const json* v = Field(body, "presence_penalty")) {
    s.presence_penalty = static_cast<float>(Number(*v, "presence_penalty", -2, 2));
  }
  if (const json* v = Field(body, "frequency_penalty")) {
    s.frequency_penalty = static_cast<float>(Number(*v, "frequency_penalty", -2, 2));
  }
  for (const char* f : {"repeat_penalty", "repetition_penalty"}) {
    if (const json* v = Field(body, f)) {
      s.repetition_penalty = static_cast<float>(Number(*v, f, 0, 10));
      if (s.repetition_penalty <= 0.0f) BadRequest(f, std::string("'") + f + "' must be > 0");
    }
  }
  if (const json* v = Field(body, "seed")) {
    if (!v->is_number_integer() && !v->is_number_unsigned()) WrongType("seed", "an integer", *v);
    s.seed =
        v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
  } else if (!s.greedy() && !defaults.fixed_seed) {
    s.seed = std::random_device{}();  // OpenAI: sampling without a seed is not reproducible
  }
  if (const json* v = Field(body, "logit_bias")) {
    for (const auto& [key, bias] : Object(*v, "logit_bias").items()) {
      const std::string param = "logit_bias." + key;
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != key.size() || id < 0 || id >= defaults.n_vocab) {
        BadRequest(param, "logit_bias keys must be token ids in [0, " +
                              std::to_string(defaults.n_vocab) + ")");
      }
      s.logit_bias.emplace_back(static_cast<int32_t>(id),
                                static_cast<float>(Number(bias, param, -100, 100)));
    }
  }
  if (const json* v = Field(body, "stop")) {
    auto add = [&](const json& x, const std::string& param) {
      const std::string& t = String(x, param);
      if (t.empty()) BadRequest(param, "stop strings must not be empty");
      r.stop.push_back(t);
    };
    if (v->is_string()) {
      add(*v, "stop");
    } else if (v->is_array()) {
      if (v->size() > 16) BadRequest("stop", "at most 16 stop strings are supported");
      for (size_t i = 0; i < v->size(); ++i) add((*v)[i], "stop[" + std::to_string(i) + "]");
    } else {
      WrongType("stop", "a string or an array of strings", *v);
    }
  }
  if (const json* v = Field(body, "stream")) r.stream = Bool(*v, "stream");
  if (const json* v = Field(body, "stream_options")) {
    if (const json* u = Field(Object(*v, "stream_options"), "include_usage")) {
      r.include_usage = Bool(*u, "stream_options.include_usage");
    }
    if (const json* t = Field(*v, "crossword_trace")) {
      r.trace = Bool(*t, "stream_options.crossword_trace");
    }
  }
  if (const json* v = Field(body, "ignore_eos"); v && Bool(*v, "ignore_eos")) {
    // As llama-server: the end-of-generation tokens are banned (-inf logit), not merely
    // ignored, so that no <|im_end|> turns up in the text and the answer runs to max_tokens.
    for (int32_t id : p.eog_ids) p.sampling.logit_bias.emplace_back(id, -INFINITY);
    p.eog_ids.clear();
  }
  if (const json* v = Field(body, "cache_prompt")) r.cache_prompt = Bool(*v, "cache_prompt");
  // logprobs: chat sends a boolean plus top_logprobs, completions an integer count.
  if (const json* v = Field(body, "logprobs")) {
    if (v->is_boolean()) {
      if (v->get<bool>()) r.logprobs = 0;
    } else {
      r.logprobs = static_cast<int>(Integer(*v, "logprobs", 0, 20));
    }
  }
  if (const json* v = Field(body, "top_logprobs")) {
    const int n = static_cast<int>(Integer(*v, "top_logprobs", 0, 20));
    if (r.logprobs < 0 && n > 0)
      BadRequest("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (r.logprobs >= 0) r.logprobs = n;
  }
  ParseStructuredFields(body, r);
  // Decoding mode: the "crossword" extension object, or the same keys at the top level.
  ApplyDecodingExtension(body, "", defaults.n_layer, p);
  if (const json* v = Field(body, "crossword"))
    ApplyDecodingExtension(Object(*v, "crossword"), "crossword.", defaults.n_layer, p);
}

namespace {

json NormalizeToolCall(const json& call, const std::string& param) {
  Object(call, param);
  json out = json::object();
  if (const json* id = Field(call, "id")) out["id"] = String(*id, param + ".id");
  out["type"] = "function";
  if (const json* t = Field(call, "type"); t && String(*t, param + ".type") != "function") {
    BadRequest(param + ".type", "tool call type must be \"function\"");
  }
  const json* fn = Field(call, "function");
  if (!fn) BadRequest(param + ".function", "'" + param + ".function' is required");
  Object(*fn, param + ".function");
  const json* name = Field(*fn, "name");
  if (!name) BadRequest(param + ".function.name", "'" + param + ".function.name' is required");
  json f = {{"name", String(*name, param + ".function.name")}};
  json args = json::object();
  if (const json* a = Field(*fn, "arguments")) {
    if (a->is_string()) {
      // OpenAI sends arguments as JSON text; the template needs the object.
      const std::string& text = a->get_ref<const std::string&>();
      if (auto e = JsonLimitError(text)) {
        BadRequest(param + ".function.arguments",
                   "'" + param + ".function.arguments' (JSON text) is " + *e);
      }
      try {
        args = text.empty() ? json::object() : json::parse(text);
      } catch (const json::exception&) {
        BadRequest(param + ".function.arguments",
                   "'" + param + ".function.arguments' is not valid JSON");
      }
    } else {
      args = *a;
    }
    if (!args.is_object())
      BadRequest(param + ".function.arguments", "tool call arguments must be a JSON object");
    CheckDepth(args, param + ".function.arguments");
  }
  f["arguments"] = args;
  out["function"] = f;
  return out;
}

json NormalizeMessages(const json* messages) {
  if (!messages) BadRequest("messages", "'messages' is required");
  if (!messages->is_array()) WrongType("messages", "an array of messages", *messages);
  if (messages->empty()) BadRequest("messages", "'messages' must contain at least one message");
  json out = json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string pm = "messages[" + std::to_string(i) + "]";
    const json& m = Object((*messages)[i], pm);
    const json* role = Field(m, "role");
    if (!role) BadRequest(pm + ".role", "'" + pm + ".role' is required");
    std::string r = String(*role, pm + ".role");
    if (r == "developer") r = "system";
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      BadRequest(pm + ".role",
                 "unknown role '" + r + "' (system, developer, user, assistant or tool)");
    }
    json n = {{"role", r}};
    const json* content = Field(m, "content");
    n["content"] = content ? ContentText(*content, pm + ".content") : std::string();
    if (const json* name = Field(m, "name")) n["name"] = String(*name, pm + ".name");
    if (const json* rc = Field(m, "reasoning_content"))
      n["reasoning_content"] = String(*rc, pm + ".reasoning_content");
    if (const json* id = Field(m, "tool_call_id"))
      n["tool_call_id"] = String(*id, pm + ".tool_call_id");
    if (const json* calls = Field(m, "tool_calls")) {
      if (!calls->is_array()) WrongType(pm + ".tool_calls", "an array", *calls);
      if (r != "assistant")
        BadRequest(pm + ".tool_calls", "only assistant messages carry tool_calls");
      json c = json::array();
      for (size_t k = 0; k < calls->size(); ++k) {
        c.push_back(NormalizeToolCall((*calls)[k], pm + ".tool_calls[" + std::to_string(k) + "]"));
      }
      if (!c.empty()) n["tool_calls"] = c;
    }
    out.push_back(std::move(n));
  }
  return out;
}

json ValidateTools(const json& tools) {
  if (!tools.is_array()) WrongType("tools", "an array of tools", tools);
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string pt = "tools[" + std::to_string(i) + "]";
    const json& t = Object(tools[i], pt);
    const json* type = Field(t, "type");
    if (!type || String(*type, pt + ".type") != "function")
      BadRequest(pt + ".type", "tool type must be \"function\"");
    const json* fn = Field(t, "function");
    if (!fn) BadRequest(pt + ".function", "'" + pt + ".function' is required");
    Object(*fn, pt + ".function");
    const json* name = Field(*fn, "name");
    if (!name || String(*name, pt + ".function.name").empty()) {
      BadRequest(pt + ".function.name", "every tool needs a non-empty function name");
    }
    if (const json* d = Field(*fn, "description")) String(*d, pt + ".function.description");
    if (const json* p = Field(*fn, "parameters")) {
      CheckDepth(Object(*p, pt + ".function.parameters"), pt + ".function.parameters");
    }
  }
  return tools;
}

}  // namespace

ChatRequest ParseChatRequest(const json& body, const RequestDefaults& defaults) {
  ChatRequest r;
  ParseGenerationFields(body, defaults, r);
  r.messages = NormalizeMessages(Field(body, "messages"));
  if (const json* v = Field(body, "tools")) r.tools = ValidateTools(*v);
  if (const json* v = Field(body, "tool_choice")) {
    if (v->is_string()) {
      const std::string& c = v->get_ref<const std::string&>();
      if (c == "auto") {
        r.tool_choice = ToolChoice::kAuto;
      } else if (c == "none") {
        r.tool_choice = ToolChoice::kNone;
      } else if (c == "required") {
        r.tool_choice = ToolChoice::kRequired;
      } else {
        BadRequest("tool_choice",
                   "'tool_choice' must be \"auto\", \"none\", \"required\" or a named function");
      }
    } else {
      const json& o = Object(*v, "tool_choice");
      const json* fn = Field(o, "function");
      const json* name = fn ? Field(Object(*fn, "tool_choice.function"), "name") : nullptr;
      if (!name) BadRequest("tool_choice.function.name", "a named tool_choice needs function.name");
      r.tool_choice = ToolChoice::kNamed;
      r.tool_name = String(*name, "tool_choice.function.name");
      bool found = false;
      for (const auto& t : r.tools) found = found || t["function"]["name"] == r.tool_name;
      if (!found)
        BadRequest("tool_choice",
                   "tool_choice names '" + r.tool_name + "', which is not in 'tools'");
    }
    if ((r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed) &&
        r.tools.empty()) {
      BadRequest("tool_choice", "tool_choice requires a tool but 'tools' is empty");
    }
  }
  if (const json* v = Field(body, "parallel_tool_calls"))
    r.parallel_tool_calls = Bool(*v, "parallel_tool_calls");
  {
    const json* cont = Field(body, "continue_final_message");
    const json* gen = Field(body, "add_generation_prompt");
    const bool cont_on = cont && Bool(*cont, "continue_final_message");
    if (gen) r.add_generation_prompt = Bool(*gen, "add_generation_prompt");
    if (cont_on && gen && r.add_generation_prompt) {
      BadRequest("continue_final_message",
                 "continue_final_message and add_generation_prompt cannot both be true");
    }
    const bool last_is_assistant = r.messages.back()["role"] == "assistant";
    if (cont_on && !last_is_assistant) {
      BadRequest("continue_final_message",
                 "continue_final_message needs a final assistant message to continue");
    }
    // llama-server continues a final assistant message unless a new turn is asked for.
    r.continue_final = cont_on || (last_is_assistant && !gen && !(cont && !cont_on));
    if (r.continue_final) r.add_generation_prompt = false;
  }
  r.reasoning_format = defaults.reasoning_format;
  if (const json* v = Field(body, "reasoning_format")) {
    r.reasoning_format = ParseReasoningFormat(String(*v, "reasoning_format"), "reasoning_format");
  }
  r.kwargs = defaults.kwargs;
  if (const json* v = Field(body, "chat_template_kwargs")) {
    for (const auto& [k, x] : Object(*v, "chat_template_kwargs").items()) r.kwargs[k] = x;
  }
  // Thinking switches that survive gateways dropping chat_template_kwargs.
  if (const json* v = Field(body, "enable_thinking")) {
    const bool on = Bool(*v, "enable_thinking");
    if (!Field(body, "chat_template_kwargs") ||
        !body["chat_template_kwargs"].contains("enable_thinking")) {
      r.kwargs["enable_thinking"] = on;
    }
  }
  if (const json* v = Field(body, "reasoning_effort")) {
    const std::string& e = String(*v, "reasoning_effort");
    if (e == "none" && !(Field(body, "chat_template_kwargs") &&
                         body["chat_template_kwargs"].contains("enable_thinking"))) {
      r.kwargs["enable_thinking"] = false;
    }
  }
  return r;
}

CompletionRequest ParseCompletionRequest(const json& body, const RequestDefaults& defaults) {
  CompletionRequest r;
  ParseGenerationFields(body, defaults, r);
  if (!Field(body, "max_tokens") && !Field(body, "n_predict") &&
      !Field(body, "max_completion_tokens") && defaults.n_predict <= 0) {
    r.params.max_tokens = 16;  // OpenAI's default for completions
    r.max_tokens_given = true;
  }
  if (const json* v = Field(body, "echo"); v && Bool(*v, "echo"))
    BadRequest("echo", "echo is not supported");
  if (const json* v = Field(body, "suffix")) {
    if (!String(*v, "suffix").empty())
      BadRequest("suffix", "suffix (fill-in-the-middle) is not supported");
  }
  if (const json* v = Field(body, "best_of"); v && Integer(*v, "best_of", 1, 128) != 1) {
    BadRequest("best_of", "only best_of = 1 is supported");
  }
  const json* prompt = Field(body, "prompt");
  if (!prompt) BadRequest("prompt", "'prompt' is required");
  // One prompt: a string or token ids. Several: a list of strings or of token-id lists.
  auto one = [&](const json& p, const std::string& param) {
    CompletionRequest::Prompt out;
    if (p.is_string()) {
      out.text = p.get<std::string>();
      if (out.text.empty()) BadRequest(param, "'" + param + "' must not be empty");
    } else if (p.is_array()) {
      if (p.empty()) BadRequest(param, "'" + param + "' must not be empty");
      for (size_t i = 0; i < p.size(); ++i) {
        if (p[i].is_string()) BadRequest(param, "a prompt is a string or a list of token ids");
        out.tokens.push_back(
            static_cast<int32_t>(Integer(p[i], param + "[" + std::to_string(i) + "]", 0,
                                         std::max<int64_t>(0, defaults.n_vocab - 1))));
      }
      out.tokens_given = true;
    } else {
      WrongType(param, "a string or an array of token ids", p);
    }
    return out;
  };
  std::vector<CompletionRequest::Prompt> prompts;
  const bool several = prompt->is_array() && !prompt->empty() &&
                       ((*prompt)[0].is_string() || (*prompt)[0].is_array());
  if (several) {
    for (size_t i = 0; i < prompt->size(); ++i)
      prompts.push_back(one((*prompt)[i], "prompt[" + std::to_string(i) + "]"));
  } else {
    prompts.push_back(one(*prompt, "prompt"));
  }
  if (static_cast<int64_t>(prompts.size()) * r.n > 128)
    BadRequest("prompt", "at most 128 choices per request (prompts x n)");
  r.prompt = std::move(prompts[0].text);
  r.prompt_tokens = std::move(prompts[0].tokens);
  r.tokens_given = prompts[0].tokens_given;
  r.more.assign(std::make_move_iterator(prompts.begin() + 1),
                std::make_move_iterator(prompts.end()));
  return r;
}

std::string ContentText(const json& content, const std::string& param,
                        std::initializer_list<std::string_view> text_types) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) WrongType(param, "a string or an array of content parts", content);
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string pp = param + "[" + std::to_string(i) + "]";
    const json& part = Object(content[i], pp);
    const json* type = Field(part, "type");
    if (!type) BadRequest(pp + ".type", "'" + pp + ".type' is required");
    const std::string& t = String(*type, pp + ".type");
    if (std::find(text_types.begin(), text_types.end(), t) == text_types.end())
      BadRequest(pp + ".type", "content part type '" + t + "' is not supported (text only)");
    const char* field = t == "refusal" ? "refusal" : "text";
    const json* text = Field(part, field);
    if (!text) BadRequest(pp + "." + field, "'" + pp + "." + field + "' is required");
    out += String(*text, pp + "." + field);
  }
  return out;
}

}  // namespace crossword::server
