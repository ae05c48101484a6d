// llama-server's native completion routes on the exchange runner: POST /completion (and
// /completions) and POST /infill. Request fields: prompt (a string, token ids, or both mixed in
// one array), n_predict (-1: the rest of the context), n_probs, post_sampling_probs,
// return_tokens, response_fields, logit_bias (object or [[id|string, bias|false], ...]),
// samplers, ignore_eos, cache_prompt and the shared sampling fields. Answers as llama-server:
// content, tokens, stop, stop_type, stopping_word, truncated, timings (cache_n),
// generation_settings, completion_probabilities; a stream is `data: {...}` events ending with
// the one that has "stop": true (no [DONE]).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "grammar/json_schema.h"
#include "server/server_impl.h"
#include "tokenizer/utf8.h"

namespace crossword::server {

using json = nlohmann::ordered_json;

namespace {

struct NativeOptions {
  bool return_tokens = false;
  int n_probs = 0;
  bool post_sampling_probs = false;
  json response_fields;  ///< null: every field
  json generation_settings;
  std::string prompt_text;
};

// A token entry in llama-server's form: logprobs, or probabilities with post_sampling_probs.
json ProbEntry(const json& e, bool probs) {
  if (!probs) return e;
  json out = {{"id", e["id"]},
              {"token", e["token"]},
              {"bytes", e["bytes"]},
              {"prob", std::exp(e["logprob"].get<double>())}};
  if (e.contains("top_logprobs")) {
    json tops = json::array();
    for (const auto& t : e["top_logprobs"]) tops.push_back(ProbEntry(t, true));
    out["top_probs"] = tops;
  }
  return out;
}

// llama-server's json_get_nested_values: {"a/b": value of a.b} for each path found.
json PickFields(const json& paths, const json& result) {
  json out = json::object();
  for (const auto& p : paths) {
    if (!p.is_string()) continue;
    const std::string path = p.get<std::string>();
    const json* cur = &result;
    size_t start = 0;
    bool found = true;
    while (found) {
      const size_t slash = path.find('/', start);
      const std::string key = path.substr(start, slash - start);
      found = cur->is_object() && cur->contains(key);
      if (found) cur = &(*cur)[key];
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    if (found) out[path] = *cur;
  }
  return out;
}

class NativeWriter : public ProtocolWriter {
 public:
  NativeWriter(WriterContext c, NativeOptions o) : c_(std::move(c)), o_(std::move(o)) {}

  json Final(std::span<const chat::StreamDelta> deltas, Finished& f) override {
    std::string content;
    for (const auto& d : deltas) content += d.text;
    json r = Result(content, f, f.outcome.output);
    if (o_.n_probs > 0) r["completion_probabilities"] = Probs(f.logprobs);
    return o_.response_fields.is_array() ? PickFields(o_.response_fields, r) : r;
  }

  std::string Head() override { return ""; }

  void NoteTokens(std::span<const int32_t> ids) override { ids_.assign(ids.begin(), ids.end()); }

  std::string Deltas(std::span<const chat::StreamDelta> deltas, std::vector<json>& lp) override {
    std::string out;
    for (const auto& d : deltas) {
      predicted_ += static_cast<int64_t>(ids_.size());
      json c = {{"index", 0},
                {"content", d.text},
                {"tokens", o_.return_tokens ? json(ids_) : json::array()},
                {"stop", false},
                {"id_slot", -1},
                {"tokens_predicted", predicted_},
                {"tokens_evaluated", c_.prompt_tokens}};
      if (o_.n_probs > 0) c["completion_probabilities"] = Probs(lp);
      lp.clear();
      ids_.clear();
      out += Sse(c);
    }
    return out;
  }

  std::string Tail(Finished& f) override {
    json r = Result("", f, {});
    if (o_.n_probs > 0 && !f.logprobs.empty()) r["completion_probabilities"] = Probs(f.logprobs);
    return Sse(o_.response_fields.is_array() ? PickFields(o_.response_fields, r) : r);
  }

  std::string StreamError(const ApiError& e) override {
    return Sse({{"error", {{"code", e.status()}, {"message", e.what()}, {"type", e.type()}}}});
  }

 private:
  json Probs(const std::vector<json>& lp) const {
    json a = json::array();
    for (const auto& e : lp) a.push_back(ProbEntry(e, o_.post_sampling_probs));
    return a;
  }

  json Result(const std::string& content, const Finished& f,
              const std::vector<int32_t>& tokens) const {
    const auto& o = f.outcome;
    std::string stop_type = "none";
    if (o.finish == decode::FinishReason::kLength) {
      stop_type = "limit";
    } else if (!f.stop_string.empty()) {
      stop_type = "word";
    } else if (o.finish == decode::FinishReason::kStop) {
      stop_type = "eos";
    }
    const int64_t n = static_cast<int64_t>(o.output.size());
    return {{"index", 0},
            {"content", content},
            {"tokens", o_.return_tokens ? json(tokens) : json::array()},
            {"id_slot", o.slot},
            {"stop", true},
            {"model", c_.model},
            {"tokens_predicted", n},
            {"tokens_evaluated", o.prompt_tokens},
            {"generation_settings", o_.generation_settings},
            {"prompt", o_.prompt_text},
            {"has_new_line", content.find('\n') != std::string::npos},
            {"truncated", false},
            {"stop_type", stop_type},
            {"stopping_word", f.stop_string},
            {"tokens_cached", o.prompt_tokens + n},
            {"timings", TimingsJson(f, c_.mode)}};
  }

  WriterContext c_;
  NativeOptions o_;
  std::vector<int32_t> ids_;  // tokens of the next delta
  int64_t predicted_ = 0;
};

// Appends one prompt element: a string (tokenized, special tokens parsed) or a token id.
void AppendPromptPart(const tokenizer::Tokenizer& tok, const json& v, const std::string& param,
                      int64_t n_vocab, std::vector<int32_t>& out) {
  if (v.is_string()) {
    tok.EncodeAppend(v.get<std::string>(), /*parse_special=*/true, out);
  } else {
    out.push_back(static_cast<int32_t>(Integer(v, param, 0, std::max<int64_t>(0, n_vocab - 1))));
  }
}

// llama-server's prompt forms for one prompt: "text", [ids...], or [ids and "text" mixed], or a
// list holding one of those. Several prompts are a 400 here (one result per request).
std::vector<int32_t> NativePrompt(const tokenizer::Tokenizer& tok, const json& prompt,
                                  int64_t n_vocab) {
  const json* p = &prompt;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  std::vector<int32_t> out;
  if (p->is_string()) {
    AppendPromptPart(tok, *p, "prompt", n_vocab, out);
  } else if (p->is_array()) {
    bool any_number = false;
    for (const auto& v : *p) any_number = any_number || v.is_number();
    if (!any_number && p->size() > 1) {
      BadRequest("prompt",
                 "several prompts in one /completion request are not supported: send one request "
                 "per prompt, or use /v1/completions");
    }
    for (size_t i = 0; i < p->size(); ++i) {
      const json& v = (*p)[i];
      if (!v.is_string() && !v.is_number_integer() && !v.is_number_unsigned()) {
        WrongType("prompt[" + std::to_string(i) + "]", "a token id or a string", v);
      }
      AppendPromptPart(tok, v, "prompt[" + std::to_string(i) + "]", n_vocab, out);
    }
  } else {
    WrongType("prompt", "a string, an array of token ids, or an array mixing both", *p);
  }
  return out;
}

// logit_bias as llama-server takes it: {"id": bias} or [[id or "text", bias], ...]; a bias of
// false bans the token (-inf); a string biases each of its tokens.
void NativeLogitBias(const tokenizer::Tokenizer& tok, const json& v, int64_t n_vocab,
                     decode::SamplingParams& s) {
  auto bias_of = [](const json& b, const std::string& param) -> float {
    if (b.is_boolean()) {
      if (b.get<bool>()) BadRequest(param, "a logit bias is a number or false (banned)");
      return -INFINITY;
    }
    return static_cast<float>(Number(b, param, -100, 100));
  };
  auto add_id = [&](const json& id, float bias, const std::string& param) {
    s.logit_bias.emplace_back(
        static_cast<int32_t>(Integer(id, param, 0, std::max<int64_t>(0, n_vocab - 1))), bias);
  };
  if (v.is_object()) {
    for (const auto& [key, b] : v.items()) {
      const std::string param = "logit_bias." + key;
      json id;
      try {
        size_t used = 0;
        id = std::stoll(key, &used);
        if (used != key.size()) throw std::invalid_argument(key);
      } catch (const std::exception&) {
        // A text key: each of its tokens.
        for (int32_t t : tok.Encode(key, /*parse_special=*/false))
          s.logit_bias.emplace_back(t, bias_of(b, param));
        continue;
      }
      add_id(id, bias_of(b, param), param);
    }
    return;
  }
  if (!v.is_array()) WrongType("logit_bias", "an object or an array of [token, bias] pairs", v);
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string param = "logit_bias[" + std::to_string(i) + "]";
    const json& pair = v[i];
    if (!pair.is_array() || pair.size() != 2) WrongType(param, "a [token, bias] pair", pair);
    const float bias = bias_of(pair[1], param + "[1]");
    if (pair[0].is_string()) {
      for (int32_t t : tok.Encode(pair[0].get<std::string>(), /*parse_special=*/false))
        s.logit_bias.emplace_back(t, bias);
    } else {
      add_id(pair[0], bias, param + "[0]");
    }
  }
}

// `samplers`: llama.cpp's chain, as names or its one-letter string ("kpmt"). crossword's order is
// fixed (penalties, top_k, top_p, min_p, temperature); a sampler left out of the list is off.
void NativeSamplers(const json& v, decode::SamplingParams& s) {
  std::vector<std::string> names;
  if (v.is_string()) {
    for (char c : v.get<std::string>()) {
      switch (c) {
        case 'k':
          names.push_back("top_k");
          break;
        case 'p':
          names.push_back("top_p");
          break;
        case 'm':
          names.push_back("min_p");
          break;
        case 't':
          names.push_back("temperature");
          break;
        case 'e':
          names.push_back("penalties");
          break;
        default:
          names.push_back(std::string(1, c));
      }
    }
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i)
      names.push_back(String(v[i], "samplers[" + std::to_string(i) + "]"));
  } else {
    WrongType("samplers", "an array of sampler names or a string", v);
  }
  auto has = [&](const char* n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  for (const std::string& n : names) {
    static constexpr const char* kKnown[] = {"penalties", "dry",         "top_n_sigma", "top_k",
                                             "typ_p",     "typical_p",   "top_p",       "min_p",
                                             "xtc",       "temperature", "infill"};
    bool known = false;
    for (const char* k : kKnown) known = known || n == k;
    if (!known) BadRequest("samplers", "unknown sampler '" + n + "'");
  }
  if (!has("top_k")) s.top_k = 0;
  if (!has("top_p")) s.top_p = 1.0f;
  if (!has("min_p")) s.min_p = 0.0f;
  if (!has("penalties")) {
    s.repetition_penalty = 1.0f;
    s.presence_penalty = 0.0f;
    s.frequency_penalty = 0.0f;
  }
}

// The model's FIM tokens (GGUF keys, else the usual texts); nullopt when one is missing.
std::optional<std::array<int32_t, 3>> FimTokens(const engine::Engine& e) {
  const auto& tok = e.tokenizer();
  std::array<int32_t, 3> ids{};
  const char* keys[] = {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
                        "tokenizer.ggml.fim_mid_token_id"};
  const char* texts[] = {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"};
  for (int i = 0; i < 3; ++i) {
    if (auto v = e.model().file().GetUint(keys[i])) {
      ids[i] = static_cast<int32_t>(*v);
      continue;
    }
    const std::vector<int32_t> t = tok.Encode(texts[i], /*parse_special=*/true);
    if (t.size() != 1 || tok.TokenText(t[0]) != texts[i]) return std::nullopt;
    ids[i] = t[0];
  }
  return ids;
}

}  // namespace

void Server::Impl::HandleNativeCompletion(const http::Request& req, http::Response& res,
                                          bool infill) {
  json body = ParseBody(req.body);
  const auto& tok = engine->tokenizer();
  const int64_t n_vocab = defaults.n_vocab;
  NativeOptions no;
  std::vector<int32_t> prompt;
  if (infill) {
    const auto fim = FimTokens(*engine);
    if (!fim) {
      BadRequest("",
                 "this model has no fill-in-the-middle tokens (<|fim_prefix|>, "
                 "<|fim_suffix|>, <|fim_middle|>): /infill is not available");
    }
    if (const json* v = Field(body, "input_extra"); v && !(v->is_array() && v->empty()))
      BadRequest("input_extra", "input_extra (repository context) is not supported");
    prompt.push_back((*fim)[0]);
    if (const json* v = Field(body, "input_prefix"))
      tok.EncodeAppend(String(*v, "input_prefix"), false, prompt);
    prompt.push_back((*fim)[1]);
    if (const json* v = Field(body, "input_suffix"))
      tok.EncodeAppend(String(*v, "input_suffix"), false, prompt);
    prompt.push_back((*fim)[2]);
    if (const json* v = Field(body, "prompt")) {
      const std::vector<int32_t> rest = NativePrompt(tok, *v, n_vocab);
      prompt.insert(prompt.end(), rest.begin(), rest.end());
    }
  } else {
    const json* p = Field(body, "prompt");
    if (!p) BadRequest("prompt", "'prompt' is required");
    prompt = NativePrompt(tok, *p, n_vocab);
  }
  if (prompt.empty()) BadRequest("prompt", "the prompt encodes to no tokens");
  // Fields whose native meaning differs from the OpenAI one are taken out before the shared
  // parsing: n_predict -1 (no limit), seed -1 (random), logit_bias in its native forms.
  if (const json* v = Field(body, "n_predict")) {
    if (Integer(*v, "n_predict", -1, std::numeric_limits<int32_t>::max()) == 0)
      BadRequest("n_predict", "'n_predict' must be -1 (no limit) or >= 1");
    if (v->get<int64_t>() < 0) body.erase("n_predict");
  }
  if (const json* v = Field(body, "seed"); v && v->is_number_integer() && v->get<int64_t>() == -1)
    body.erase("seed");
  json logit_bias;
  if (const json* v = Field(body, "logit_bias")) {
    logit_bias = *v;
    body.erase("logit_bias");
  }
  if (const json* v = Field(body, "mirostat"); v && Integer(*v, "mirostat", 0, 2) != 0)
    BadRequest("mirostat", "mirostat sampling is not supported");
  for (const char* f : {"logprobs", "top_logprobs"}) body.erase(f);  // OpenAI's, not native
  CompletionRequest r;
  ParseGenerationFields(body, defaults, r);
  if (r.n != 1) BadRequest("n", "/completion answers one result: send n requests, or use /v1");
  if (!logit_bias.is_null()) {
    NativeLogitBias(tok, logit_bias, n_vocab, r.params.sampling);
    // With every token banned nothing can be generated (a diffusion block would never commit).
    std::vector<uint8_t> banned(static_cast<size_t>(std::max<int64_t>(0, n_vocab)), 0);
    int64_t n_banned = 0;
    for (const auto& [id, bias] : r.params.sampling.logit_bias) {
      if (bias == -INFINITY && !banned[static_cast<size_t>(id)]) {
        banned[static_cast<size_t>(id)] = 1;
        ++n_banned;
      }
    }
    if (n_banned >= n_vocab) {
      BadRequest("logit_bias", "bans every token of the vocabulary (" + std::to_string(n_vocab) +
                                   "): nothing could be generated");
    }
  }
  if (const json* v = Field(body, "samplers")) NativeSamplers(*v, r.params.sampling);
  if (const json* v = Field(body, "n_probs"))
    no.n_probs = static_cast<int>(Integer(*v, "n_probs", 0, 100));
  if (no.n_probs > 0) r.logprobs = no.n_probs;
  if (const json* v = Field(body, "post_sampling_probs"))
    no.post_sampling_probs = Bool(*v, "post_sampling_probs");
  if (const json* v = Field(body, "return_tokens")) no.return_tokens = Bool(*v, "return_tokens");
  if (const json* v = Field(body, "response_fields")) {
    if (!v->is_array()) WrongType("response_fields", "an array of field paths", *v);
    no.response_fields = *v;
  }
  r.params.think_open = engine->ThinkOpen(prompt);
  if (!r.grammar.empty()) {
    grammar::GrammarLimits limits;
    if (r.grammar_generated) {
      limits.max_text_bytes = grammar::JsonSchemaOptions{}.max_grammar_bytes;
      limits.max_nesting = 256;
    }
    try {
      r.params.grammar = engine->CompileGrammar(r.grammar, r.params.think_open, limits);
    } catch (const grammar::GrammarError& e) {
      BadRequest(r.grammar_param, e.what());
    }
    if (r.params.eog_ids.empty())
      BadRequest("ignore_eos", "ignore_eos cannot be combined with structured output");
  }
  no.prompt_text = tok.Decode(prompt);
  decode::DecodeParams shown = r.params;
  if (!r.max_tokens_given) shown.max_tokens = -1;
  no.generation_settings = ParamsJson(shown);
  no.generation_settings["n_probs"] = no.n_probs;
  no.generation_settings["post_sampling_probs"] = no.post_sampling_probs;
  GenerationJob job;
  job.prompt_param = "prompt";
  job.id_prefix = "cmpl-";
  job.writer = [no](WriterContext c) { return std::make_unique<NativeWriter>(std::move(c), no); };
  job.prompt = std::move(prompt);
  job.output.stop = r.stop;
  job.output.parse = false;
  if (options.log_prompts) job.prompt_text = no.prompt_text;
  job.gen = std::move(static_cast<GenerationRequest&>(r));
  Generate(req, res, std::move(job));
}

}  // namespace crossword::server
