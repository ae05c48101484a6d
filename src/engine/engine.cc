// Engine: loading the bundle and deriving per-model decoding defaults.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "backends/registry.h"
#include "base/error.h"

namespace crossword::engine {

std::unique_ptr<Engine> Engine::Load(const EngineOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Engine> e(new Engine());
  e->logger_ = options.logger;
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int threads = options.threads;
  if (threads <= 0) threads = hw;
  // Every pass splits its work over the pool and waits for the slowest thread: threads beyond the
  // hardware's only add context switches. A few are tolerated (a warning; numbers stay the same),
  // an absurd count (-t 1000 on 2 cores) is refused before 1000 threads are started.
  Check(threads <= 4 * hw,
        "-t {} is more than 4 threads per hardware thread ({} here); use at most {} (-t 0: all)",
        threads, hw, hw);
  if (threads > hw) {
    options.logger.Warn("-t {} exceeds the {} hardware threads: passes will be slower than with {}",
                        threads, hw, hw);
  }
  // Flags are checked before the (possibly long) load.
  backends::ExecutorOptions xo;
  xo.device = options.device;
  xo.n_gpu_layers = options.n_gpu_layers;
  xo.threads = threads;
  xo.repack = options.repack;
  xo.logger = options.logger;
  backends::ResolveDevice(xo);
  model::LoadOptions lo;
  lo.map = options.map;
  lo.logger = options.logger;
  if (options.model_path.empty()) {
    std::span<const std::byte> bytes = EmbeddedModel();
    if (bytes.empty()) Fail("no model given (-m FILE) and this build embeds no default model");
    e->model_ = model::Model::FromFile(gguf::File::Parse(bytes), lo);
    e->name_ = "(embedded) clover-tiny";
  } else {
    e->model_ = model::Model::Load(options.model_path, lo);
    e->name_ = options.model_path;
  }
  e->executor_ = backends::CreateExecutor(e->model_, xo);
  e->tokenizer_ =
      std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::FromGguf(e->model_->file()));
  if (!options.chat_template.empty()) {
    try {
      e->template_ = std::make_unique<chat::Template>(chat::Template::Parse(options.chat_template));
    } catch (const chat::TemplateError& err) {
      Fail("the chat template given (--chat-template / --chat-template-file) does not parse: {}",
           err.what());
    }
  } else if (auto src = e->model_->file().GetString("tokenizer.chat_template")) {
    e->template_ = std::make_unique<chat::Template>(chat::Template::Parse(*src));
  }
  for (int32_t id = 0; id < e->tokenizer_->n_vocab(); ++id) {
    if (e->tokenizer_->GetTokenType(id) == tokenizer::TokenType::kControl) {
      e->control_texts_.emplace_back(e->tokenizer_->TokenBytes(id));
    }
  }
  std::sort(e->control_texts_.begin(), e->control_texts_.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  e->load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return e;
}

std::string Engine::RenderChat(const nlohmann::ordered_json& messages,
                               const nlohmann::ordered_json& tools,
                               const nlohmann::ordered_json& kwargs,
                               bool add_generation_prompt) const {
  if (!template_)
    Fail("{} has no chat template (tokenizer.chat_template); use a plain prompt", name_);
  const auto& sp = tokenizer_->special();
  auto text = [&](std::optional<int32_t> id) {
    return id ? std::string(tokenizer_->TokenText(*id)) : std::string();
  };
  return template_->Render(chat::MakeChatContext(messages, tools, add_generation_prompt,
                                                 text(sp.bos), text(sp.eos), kwargs));
}

namespace {

// Private-use code points U+E000 / U+E001 bracket a marker "<E000>index<E001>".
constexpr std::string_view kMarkOpen = "\xEE\x80\x80";
constexpr std::string_view kMarkClose = "\xEE\x80\x81";

// Replaces control-token texts (and stray marker characters) in one string by markers.
void ProtectString(nlohmann::ordered_json& j, const std::vector<std::string>& controls,
                   std::vector<std::string>& saved) {
  const std::string& src = j.get_ref<const std::string&>();
  std::string out;
  bool changed = false;
  for (size_t i = 0; i < src.size();) {
    std::string_view rest(src.data() + i, src.size() - i);
    const std::string* hit = nullptr;
    for (const std::string& c : controls) {
      if (!c.empty() && rest.substr(0, c.size()) == c) {
        hit = &c;
        break;
      }
    }
    std::string_view lit;
    if (hit) {
      lit = *hit;
    } else if (rest.substr(0, 3) == kMarkOpen || rest.substr(0, 3) == kMarkClose) {
      lit = rest.substr(0, 3);
    }
    if (lit.empty()) {
      out.push_back(src[i++]);
      continue;
    }
    out += kMarkOpen;
    out += std::to_string(saved.size());
    out += kMarkClose;
    saved.emplace_back(lit);
    i += lit.size();
    changed = true;
  }
  if (changed) j = out;
}

// ProtectString on every string of `root`, walked with an explicit stack: request data reaches
// here, and no walk over it may recurse (the body gate bounds depth too; this does not rely on it).
void Protect(nlohmann::ordered_json& root, const std::vector<std::string>& controls,
             std::vector<std::string>& saved) {
  std::vector<nlohmann::ordered_json*> stack{&root};
  while (!stack.empty()) {
    nlohmann::ordered_json* j = stack.back();
    stack.pop_back();
    if (j->is_structured()) {
      for (auto& item : *j) stack.push_back(&item);
    } else if (j->is_string()) {
      ProtectString(*j, controls, saved);
    }
  }
}

}  // namespace

Engine::ChatPrompt Engine::EncodeChat(const nlohmann::ordered_json& messages,
                                      const nlohmann::ordered_json& tools,
                                      const nlohmann::ordered_json& kwargs,
                                      bool add_generation_prompt, bool continue_final) const {
  std::vector<std::string> saved;
  nlohmann::ordered_json m = messages, t = tools;
  Protect(m, control_texts_, saved);
  Protect(t, control_texts_, saved);
  // Continuing the final message: a mark after its text shows where the prompt must end (the
  // template's end of turn after it is cut off). Private-use characters, as Protect's marks.
  constexpr std::string_view kEnd = "\xEE\x80\x82\xEE\x80\x82";
  if (continue_final) {
    Check(!m.empty() && m.back().contains("content") && m.back()["content"].is_string() &&
              !m.back()["content"].get_ref<const std::string&>().empty(),
          "the final message has no text to continue");
    m.back()["content"] = m.back()["content"].get<std::string>() + std::string(kEnd);
  }
  std::string rendered = RenderChat(m, t, kwargs, add_generation_prompt && !continue_final);
  if (continue_final) {
    const size_t end = rendered.rfind(kEnd);
    Check(end != std::string::npos,
          "the chat template leaves out the final message's text: it cannot be continued");
    rendered.resize(end);
  }
  ChatPrompt p;
  size_t pos = 0;
  while (pos < rendered.size()) {
    const size_t open = rendered.find(kMarkOpen, pos);
    const size_t close =
        open == std::string::npos ? std::string::npos : rendered.find(kMarkClose, open + 3);
    size_t index = saved.size();
    if (close != std::string::npos) {
      const std::string digits = rendered.substr(open + 3, close - open - 3);
      if (!digits.empty() && digits.size() < 10 &&
          digits.find_first_not_of("0123456789") == std::string::npos) {
        index = std::stoul(digits);
      }
    }
    if (open == std::string::npos || index >= saved.size()) {
      // No (valid) marker left: the rest is template markup and ordinary text.
      const size_t end = open == std::string::npos ? rendered.size() : open + 3;
      const std::string_view seg(rendered.data() + pos, end - pos);
      tokenizer_->EncodeAppend(seg, /*parse_special=*/true, p.tokens);
      p.text += seg;
      pos = end;
      continue;
    }
    const std::string_view seg(rendered.data() + pos, open - pos);
    tokenizer_->EncodeAppend(seg, true, p.tokens);
    tokenizer_->EncodeAppend(saved[index], /*parse_special=*/false, p.tokens);
    p.text += seg;
    p.text += saved[index];
    pos = close + 3;
  }
  p.think_open = ThinkOpen(p.tokens);
  return p;
}

bool Engine::ThinkOpen(std::span<const int32_t> tokens) const {
  const auto& sp = tokenizer_->special();
  if (!sp.think) return false;
  for (size_t i = tokens.size(); i-- > 0;) {
    if (sp.think_end && tokens[i] == *sp.think_end) return false;
    if (tokens[i] == *sp.think) return true;
  }
  return false;
}

decode::DecodeParams Engine::DefaultDecodeParams() const {
  decode::DecodeParams p;
  const model::Hparams& hp = model_->hparams();
  p.block_size = hp.diffusion_block_size;
  p.threshold = hp.diffusion_threshold;
  p.sampling = decode::ModelDefaults(hp.arch);
  const auto& sp = tokenizer_->special();
  p.eog_ids.assign(tokenizer_->eog_ids().begin(), tokenizer_->eog_ids().end());
  p.mask_id = sp.mask.value_or(-1);
  p.eos_id = sp.eos.value_or(sp.im_end.value_or(-1));
  p.think_start_id = sp.think.value_or(-1);
  p.think_end_id = sp.think_end.value_or(-1);
  p.dllm_biases = hp.arch == "clover_moe";
  // Spec rounds draft at most kDefaultDraftMax tokens: on the tiny model a 16-token pass costs
  // about 7 AR steps against 12 for 32, while rounds accept 7.5 drafts instead of 8.9 (README).
  // A verify cut (kDefaultDraftPMin > 0) measured no faster there, so every draft is verified.
  p.draft_max = kDefaultDraftMax;
  p.draft_p_min = kDefaultDraftPMin;
  // Only where those layers lie below the last (a file of that name with fewer layers drafts
  // with every layer).
  if (const auto name = model_->file().GetString("general.name");
      hp.arch == "clover_moe" && name && *name == "clover-tiny" &&
      (kTinyDraftSkipFfn & ~model::SkippableFfnLayers(hp.n_layer)) == 0) {
    p.draft_skip_ffn = kTinyDraftSkipFfn;
  }
  // Lossless: verify computes the logits of later rows only when the earlier drafts were kept.
  p.verify_chunk = decode::kVerifyChunkAuto;
  return p;
}

std::unique_ptr<model::SequenceState> Engine::NewState(int64_t n_ctx, GgmlType kv_type) const {
  model::StateOptions so;
  so.n_ctx = n_ctx;
  so.kv_type = kv_type;
  so.max_record_tokens = std::max(model_->hparams().diffusion_block_size, 256);
  return executor_->NewState(so);
}

decode::Generation RunGeneration(const Engine& engine, model::SequenceState& state,
                                 std::vector<int32_t> prompt, const decode::DecodeParams& params,
                                 decode::TokenSink sink, const RunHooks& hooks) {
  model::ContextOptions co;
  // A fused pass (params.fuse_passes) holds a block and the next one.
  const int64_t block = int64_t{params.fuse_passes ? 2 : 1} * params.block_size;
  co.max_tokens = std::max<int64_t>(params.prefill_chunk, block);
  co.max_seqs = 1;
  co.max_logit_rows = std::max<int64_t>(block, 1);
  const model::Executor& executor = engine.executor();
  std::unique_ptr<model::ForwardContext> ctx = executor.NewContext(co);
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  const int64_t n_cached = state.n_past();
  decode::Generation gen(engine.model(), state, std::move(prompt), params, std::move(sink));
  gen.SetHostPool(executor.host_pool());
  while (!gen.done()) {
    if (hooks.stop && hooks.stop()) {
      gen.Cancel();
      break;
    }
    const int64_t before = state.n_past();
    const bool prefill = gen.output().empty() && before < n_prompt;
    model::SequenceInput in = gen.NextInput();
    const auto n_in = static_cast<int64_t>(in.tokens.size());
    executor.Forward({&in, 1}, *ctx);
    if (ctx->moe_layers() > 0)
      gen.NotePassExperts(static_cast<double>(ctx->experts_used()) / ctx->moe_layers());
    decode::DeliverLogits(gen, *ctx, 0);
    if (prefill && hooks.on_prefill)
      hooks.on_prefill(before + n_in - n_cached, n_prompt - n_cached);
  }
  return gen;
}

}  // namespace crossword::engine
