// llama-server's introspection routes: GET /props (server-wide settings: context, slots, chat
// template, special tokens, default generation settings) and GET /slots (what each slot is doing,
// with crossword's decoding mode, block size, threshold and tokens per pass). Shapes follow
// llama-server's tools/server README; fields crossword has no equivalent for are left out.
#include <algorithm>
#include <charconv>

#include "server/server_impl.h"
#include "tokenizer/utf8.h"

namespace crossword::server {

using json = nlohmann::ordered_json;

double FloatJson(float v) {
  char buf[32];
  const char* end = std::to_chars(buf, buf + sizeof(buf), v).ptr;
  double d = v;
  std::from_chars(buf, end, d);
  return d;
}

json ParamsJson(const decode::DecodeParams& p) {
  const decode::SamplingParams& s = p.sampling;
  return {{"n_predict", p.max_tokens},
          {"seed", s.seed},
          {"temperature", FloatJson(s.temperature)},
          {"top_k", s.top_k},
          {"top_p", FloatJson(s.top_p)},
          {"min_p", FloatJson(s.min_p)},
          {"repeat_penalty", FloatJson(s.repetition_penalty)},
          {"presence_penalty", FloatJson(s.presence_penalty)},
          {"frequency_penalty", FloatJson(s.frequency_penalty)},
          {"max_tokens", p.max_tokens},
          {"ignore_eos", p.eog_ids.empty()},
          {"samplers", json::array({"penalties", "top_k", "top_p", "min_p", "temperature"})},
          // llama-server's field is a number: the most a round drafts (block size - 1 at most;
          // under auto the most a round may pick, draft_max keeping its value, 15 by default).
          {"speculative.n_max",
           p.draft_max == 0 ? p.block_size - 1 : std::min(p.draft_max, p.block_size - 1)},
          {"speculative.p_min", FloatJson(p.draft_p_min)}};
}

namespace {

// crossword's decoding fields of a slot or of the defaults, named and valued as a request's
// "crossword" object takes them ("auto" for the adaptive draft length and verify chunk).
json DecodingJson(const decode::DecodeParams& p) {
  return {{"mode", decode::ModeName(p.mode)},
          {"block_size", p.block_size},
          {"threshold", FloatJson(p.threshold)},
          {"draft_max", p.draft_auto ? json("auto") : json(p.draft_max)},
          {"draft_p_min", FloatJson(p.draft_p_min)},
          {"draft_expert_budget", p.draft_expert_budget},
          {"draft_skip_ffn", model::MaskLayers(p.draft_skip_ffn)},
          {"verify_chunk",
           p.verify_chunk == decode::kVerifyChunkAuto ? json("auto") : json(p.verify_chunk)}};
}

// The settings a request that names none gets: its token limit is serve's -n, and -1 (the rest of
// the slot's context, as llama-server) when -n is not given, not DecodeParams' internal default.
json DefaultParamsJson(const RequestDefaults& d) {
  json j = ParamsJson(d.params);
  // Without --seed each sampled request draws its own seed: llama-server shows that default as
  // LLAMA_DEFAULT_SEED, 0xFFFFFFFF ("-1", a random seed).
  if (!d.fixed_seed) j["seed"] = 0xFFFFFFFFu;
  const int64_t n = d.n_predict > 0 ? d.n_predict : -1;
  j["n_predict"] = n;
  j["max_tokens"] = n;
  return j;
}

std::string TokenText(const tokenizer::Tokenizer& tok, std::optional<int32_t> id) {
  std::string s;
  if (id) tokenizer::AppendUtf8Lossy(tok.TokenBytes(*id), s);
  return s;
}

}  // namespace

void Server::Impl::HandleProps(const http::Request&, http::Response& res) {
  const decode::DecodeParams& p = defaults.params;
  const auto& tok = engine->tokenizer();
  json dgs = {{"id", 0},
              {"id_task", -1},
              {"n_ctx", n_ctx_slot},
              {"speculative", p.mode == decode::Mode::kSpec},
              {"is_processing", false},
              {"params", DefaultParamsJson(defaults)},
              {"crossword", DecodingJson(p)}};
  std::string tmpl;
  if (auto src = engine->model().file().GetString("tokenizer.chat_template")) tmpl = *src;
  json props = {{"default_generation_settings", dgs},
                {"total_slots", options.n_slots},
                {"model_alias", model_name},
                {"model_path", options.engine.model_path.empty() ? std::string("(embedded)")
                                                                 : options.engine.model_path},
                {"modalities", {{"vision", false}, {"audio", false}}},
                {"endpoint_slots", !options.no_slots},
                {"endpoint_props", false},
                {"endpoint_metrics", true},
                {"webui", !options.no_webui},
                {"chat_template", tmpl},
                {"bos_token", TokenText(tok, tok.special().bos)},
                {"eos_token", TokenText(tok, tok.special().eos)},
                {"build_info", "crossword-0.1.0"},
                {"n_ctx_train", engine->model().hparams().n_ctx_train},
                {"max_block_size", scheduler->options().max_block_size}};
  res.set_content(Dump(props), "application/json");
}

void Server::Impl::HandleSlots(const http::Request& req, http::Response& res) {
  if (options.no_slots) {
    throw ApiError(501, "not_supported_error", "",
                   "this server was started with --no-slots: the /slots endpoint is disabled");
  }
  if (req.has_param("fail_on_no_slot")) {
    const engine::SchedulerMetrics m = scheduler->Metrics();
    if (m.slots_busy >= m.n_slots)
      throw ApiError(503, "unavailable_error", "", "no slot available");
  }
  const engine::SchedulerMetrics m = scheduler->Metrics();
  json slots = json::array();
  for (const engine::SlotState& s : m.slots) {
    decode::DecodeParams p = defaults.params;
    if (s.busy) {
      p.mode = s.mode;
      p.block_size = s.block_size;
      p.threshold = s.threshold;
      p.draft_max = s.draft_max;
      p.draft_auto = s.draft_auto;
      p.draft_p_min = s.draft_p_min;
      p.draft_expert_budget = s.draft_expert_budget;
      p.draft_skip_ffn = s.draft_skip_ffn;
      p.verify_chunk = s.verify_chunk;
      p.max_tokens = s.max_tokens;
      decode::SamplingParams& sp = p.sampling;
      sp.temperature = s.temperature;
      sp.top_k = s.top_k;
      sp.top_p = s.top_p;
      sp.min_p = s.min_p;
      sp.seed = s.seed;
      sp.repetition_penalty = s.repetition_penalty;
      sp.presence_penalty = s.presence_penalty;
      sp.frequency_penalty = s.frequency_penalty;
      if (s.ignore_eos) p.eog_ids.clear();
    }
    json cw = DecodingJson(p);
    cw["tokens_per_pass"] = s.tokens_per_pass;
    cw["passes"] = s.passes;
    cw["n_past"] = s.n_past;
    cw["n_prompt"] = s.n_prompt;
    cw["phase"] = !s.busy ? "idle" : s.generating ? "generating" : "prefill";
    slots.push_back({{"id", s.id},
                     {"id_task", s.busy ? static_cast<int64_t>(s.request) : -1},
                     {"n_ctx", n_ctx_slot},
                     {"speculative", p.mode == decode::Mode::kSpec},
                     {"is_processing", s.busy},
                     {"params", s.busy ? ParamsJson(p) : DefaultParamsJson(defaults)},
                     {"next_token",
                      {{"has_next_token", s.busy},
                       {"has_new_line", false},
                       {"n_remain", s.busy ? s.max_tokens - s.n_decoded : -1},
                       {"n_decoded", s.n_decoded},
                       {"stopping_word", ""}}},
                     {"crossword", cw}});
  }
  res.set_content(Dump(slots), "application/json");
}

}  // namespace crossword::server
