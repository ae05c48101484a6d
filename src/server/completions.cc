// The generation endpoints: /v1/chat/completions and /v1/completions, streamed (SSE) or not, on
// top of the scheduler; plus /apply-template (the exact prompt a chat request becomes).
#include <chrono>
#include <thread>

#include "chat/template.h"
#include "engine/structured.h"
#include "grammar/json_schema.h"
#include "server/server_impl.h"
#include "tokenizer/utf8.h"

namespace crossword::server {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
using Kind = chat::StreamDelta::Kind;

namespace {

constexpr auto kPoll =
    std::chrono::milliseconds(50);  // how often a waiting handler checks its client

// Compiles a request's grammar for the model; a grammar error is a 400 naming `param`.
std::shared_ptr<const grammar::CompiledGrammar> CompileFor(const engine::Engine& engine,
                                                           const std::string& gbnf,
                                                           bool after_reasoning, bool generated,
                                                           const std::string& param) {
  grammar::GrammarLimits limits;
  if (generated) {  // from a schema or the tools: larger and deeper than typed grammars
    limits.max_text_bytes = grammar::JsonSchemaOptions{}.max_grammar_bytes;
    limits.max_nesting = 256;
  }
  try {
    return engine.CompileGrammar(gbnf, after_reasoning, limits);
  } catch (const grammar::GrammarError& e) {
    BadRequest(param, e.what());
  }
}

// The error of a generation that failed in the engine: a 400 when the request caused it (its
// logit_bias and grammar left no token somewhere), else a 500.
ApiError GenerationError(const engine::RequestOutcome& o) {
  if (o.client_error) return ApiError(400, "invalid_request_error", "", o.error);
  return ApiError(500, "server_error", "", "generation failed: " + o.error);
}

// Sum of accepted drafts over a spec generation's rounds.
int64_t AcceptedDrafts(const decode::DecodeStats& s) {
  int64_t n = 0;
  for (size_t k = 0; k < s.accepted_hist.size(); ++k)
    n += static_cast<int64_t>(k) * s.accepted_hist[k];
  return n;
}

// Scheduler thread: the trace event of the pass `g` just consumed (stream_options.crossword_trace).
// A denoise / draft pass shows the block as it is now; a commit / verify pass keeps the previous
// view (the generation has moved on to the next block) and says what it settled.
void TracePass(Exchange& ex, const tokenizer::Tokenizer& tok, const decode::Generation& g) {
  const decode::DecodeStats& st = g.stats();
  const decode::DecodeStats& before = ex.last_stats;
  const bool spec = g.params().mode == decode::Mode::kSpec;
  PassTrace t;
  t.pass = st.forward_passes();
  t.tokens_per_pass = st.tokens_per_pass();
  if (st.denoise_passes > before.denoise_passes) {
    t.phase = spec ? "draft" : "denoise";
    t.block = st.rounds;
    const auto block = g.block();
    const auto masked = g.masked();
    const bool same_block = ex.last_trace.block == t.block && ex.last_trace.phase == t.phase;
    t.slots.resize(block.size());
    for (size_t j = 0; j < block.size(); ++j) {
      const bool empty = spec ? block[j] == g.params().mask_id : masked[j] != 0;
      if (empty) continue;
      tokenizer::AppendUtf8Lossy(tok.TokenBytes(block[j]), t.slots[j]);
      const bool was_empty =
          !same_block || j >= ex.last_trace.slots.size() || ex.last_trace.slots[j].empty();
      if (j > 0 && was_empty) t.committed.push_back(static_cast<int>(j));
    }
    if (spec) t.drafted = static_cast<int>(t.committed.size());
  } else if (st.commit_passes > before.commit_passes) {
    // A spec round that drafted nothing (`auto`'s one-row rounds) verified its seed alone, right
    // after no draft of its own: like an AR step it has no block to show (before, its event
    // repeated the last draft's slots with 0 accepted).
    const bool own_draft = ex.last_trace.phase == "draft" && ex.last_trace.pass == t.pass - 1;
    if (spec && st.verify_rows - before.verify_rows == 1 && !own_draft) {
      ex.last_stats = st;
      return;
    }
    t.phase = spec ? "verify" : "commit";
    t.block = ex.last_trace.block;
    t.slots = ex.last_trace.slots;
    t.drafted = ex.last_trace.drafted;
    if (spec) t.accepted = static_cast<int>(AcceptedDrafts(st) - AcceptedDrafts(before));
  } else {
    return;  // an AR step (spec without drafts) has no block to show
  }
  ex.last_stats = st;
  ex.last_trace = t;
  {
    std::lock_guard lk(ex.mu);
    ex.traces.push_back(std::move(t));
  }
  ex.cv.notify_all();
}

}  // namespace

void Server::Impl::HandleApplyTemplate(const http::Request& req, http::Response& res) {
  const ChatRequest r = ParseChatRequest(ParseBody(req.body), defaults);
  engine::Engine::ChatPrompt cp;
  try {
    cp =
        engine->EncodeChat(r.messages, r.tool_choice == ToolChoice::kNone ? json::array() : r.tools,
                           r.kwargs, r.add_generation_prompt, r.continue_final);
  } catch (const chat::TemplateException& e) {
    BadRequest("messages", e.what());
  } catch (const chat::TemplateError& e) {
    BadRequest("messages", std::string("the chat template failed on these messages: ") + e.what());
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    BadRequest("continue_final_message", e.what());
  }
  res.set_content(Dump({{"prompt", cp.text}, {"tokens", cp.tokens}, {"think_open", cp.think_open}}),
                  "application/json");
}

void Server::Impl::HandleChat(const http::Request& req, http::Response& res) {
  GenerationJob job = ChatJob(ParseChatRequest(ParseBody(req.body), defaults));
  job.id_prefix = "chatcmpl-";
  job.writer = MakeChatWriter;
  Generate(req, res, std::move(job));
}

GenerationJob Server::Impl::ChatJob(ChatRequest r) {
  // Which tools the model sees: none for "none", only the named one for a named choice.
  json tools = json::array();
  if (r.tool_choice == ToolChoice::kRequired && r.tools.size() == 1) {
    r.tool_choice = ToolChoice::kNamed;  // one tool: "required" can only mean that one
    r.tool_name = r.tools[0]["function"]["name"].get<std::string>();
  }
  if (r.tool_choice == ToolChoice::kNamed) {
    for (const auto& t : r.tools) {
      if (t["function"]["name"] == r.tool_name) tools.push_back(t);
    }
  } else if (r.tool_choice != ToolChoice::kNone) {
    tools = r.tools;
  }
  engine::Engine::ChatPrompt cp;
  try {
    cp = engine->EncodeChat(r.messages, tools, r.kwargs, r.add_generation_prompt, r.continue_final);
  } catch (const chat::TemplateException& e) {
    BadRequest("messages",
               e.what());  // the template's own message, e.g. "No user query found in messages."
  } catch (const chat::TemplateError& e) {
    BadRequest("messages", std::string("the chat template failed on these messages: ") + e.what());
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    BadRequest("continue_final_message", e.what());  // nothing to continue
  }
  GenerationJob job;
  job.prompt_param = "messages";
  job.tools = tools;
  job.prompt = std::move(cp.tokens);
  job.output.stop = r.stop;
  job.output.parse = r.reasoning_format == ReasoningFormat::kDeepseek;
  job.output.parse_options.thinking_opened = cp.think_open;
  job.output.parse_options.parse_tool_calls = !tools.empty();
  job.output.parse_options.tools = tools;
  job.output.single_tool_call = !r.parallel_tool_calls;
  // "required" / named: the call's opening is put after the prompt (thinking off) or after the
  // reasoning (thinking on), so the model can only continue a call; it is parsed as output.
  if ((r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed) &&
      job.output.parse) {
    const std::string lead = cp.think_open ? "\n\n" : "";
    const std::string open = lead + "<tool_call>\n<function=";
    const std::string rest = r.tool_choice == ToolChoice::kNamed ? r.tool_name + ">\n" : "";
    std::vector<int32_t> ids = engine->tokenizer().Encode(open, /*parse_special=*/true);
    engine->tokenizer().EncodeAppend(rest, /*parse_special=*/false, ids);  // the caller's name
    const auto think_end = engine->tokenizer().special().think_end;
    if (!cp.think_open) {
      job.prompt.insert(job.prompt.end(), ids.begin(), ids.end());
      job.output.forced_prefix = open + rest;
    } else if (think_end) {
      job.force.armed = true;
      job.force.think_end = *think_end;
      job.force.text = open + rest;
      job.force.tokens = std::move(ids);
    }
  }
  // Structured output: the tool calls' grammar for a required / named choice (after the forced
  // opening when there is one), the request's grammar or schema, or (tool_choice auto) tool
  // calls limited to the declared tools; with thinking on, it starts after the reasoning.
  const bool think = cp.think_open;
  const bool calls_required =
      r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed;
  const std::string name = r.tool_choice == ToolChoice::kNamed ? r.tool_name : "";
  try {
    if (calls_required && !tools.empty()) {
      const bool forced = !job.output.forced_prefix.empty() || job.force.armed;
      const std::string gbnf =
          engine::ToolCallGbnf(tools,
                               !forced        ? engine::ToolGrammarMode::kRequired
                               : name.empty() ? engine::ToolGrammarMode::kAfterFunctionOpen
                                              : engine::ToolGrammarMode::kAfterNamedOpen,
                               name, r.parallel_tool_calls);
      if (job.force.armed) {
        job.force.grammar = CompileFor(*engine, gbnf, false, true, "tools");
      } else {
        r.params.grammar = CompileFor(*engine, gbnf, think && !forced, true, "tools");
      }
    } else if (!r.grammar.empty()) {
      r.params.grammar =
          CompileFor(*engine, r.grammar, think, r.grammar_generated, r.grammar_param);
    } else if (!tools.empty() && job.output.parse) {
      r.params.grammar = CompileFor(
          *engine,
          engine::ToolCallGbnf(tools, engine::ToolGrammarMode::kAuto, "", r.parallel_tool_calls),
          think, true, "tools");
    }
  } catch (const grammar::GrammarError& e) {
    BadRequest("tools", e.what());  // a parameter schema outside the supported subset
  }
  if ((r.params.grammar || job.force.grammar) && r.params.eog_ids.empty()) {
    BadRequest("ignore_eos", "ignore_eos cannot be combined with structured output");
  }
  r.params.think_open = cp.think_open;
  if (options.log_prompts) job.prompt_text = cp.text + job.output.forced_prefix;
  job.gen = std::move(static_cast<GenerationRequest&>(r));
  return job;
}

void Server::Impl::HandleCompletion(const http::Request& req, http::Response& res) {
  CompletionRequest r = ParseCompletionRequest(ParseBody(req.body), defaults);
  GenerationJob job;
  job.prompt_param = "prompt";
  job.id_prefix = "cmpl-";
  job.writer = MakeCompletionWriter;
  // A raw prompt is the caller's own markup: special tokens in it are parsed (as llama-server).
  job.prompt = r.tokens_given ? r.prompt_tokens
                              : engine->tokenizer().Encode(r.prompt, /*parse_special=*/true);
  if (job.prompt.empty()) BadRequest("prompt", "the prompt encodes to no tokens");
  for (const auto& p : r.more) {
    job.more_prompts.push_back(
        p.tokens_given ? p.tokens : engine->tokenizer().Encode(p.text, /*parse_special=*/true));
    if (job.more_prompts.back().empty()) BadRequest("prompt", "a prompt encodes to no tokens");
  }
  job.output.stop = r.stop;
  job.output.parse = false;
  r.params.think_open = engine->ThinkOpen(job.prompt);
  if (!r.grammar.empty()) {
    r.params.grammar =
        CompileFor(*engine, r.grammar, r.params.think_open, r.grammar_generated, r.grammar_param);
    if (r.params.eog_ids.empty()) {
      BadRequest("ignore_eos", "ignore_eos cannot be combined with structured output");
    }
  }
  if (options.log_prompts) job.prompt_text = r.tokens_given ? "(token ids)" : r.prompt;
  job.gen = std::move(static_cast<GenerationRequest&>(r));
  Generate(req, res, std::move(job));
}

std::shared_ptr<engine::RequestHandle> Server::Impl::SubmitPart(
    const std::shared_ptr<Exchange>& ex) {
  engine::ScheduledRequest sr;
  sr.prompt = ex->prompt;
  sr.params = ex->params;
  sr.use_cache = ex->use_cache;
  const tokenizer::Tokenizer* tok = &engine->tokenizer();
  sr.on_token = [ex, tok](int32_t token, std::span<const float> logits) {
    ex->scratch.clear();
    bool go = ex->stream.OnToken(token, ex->scratch);
    if (go && ex->force.armed && !ex->force.triggered && token == ex->force.think_end) {
      ex->force.triggered = true;  // the reasoning ended: stop here, continue with the call
      go = false;
    }
    ex->held.ids.push_back(token);
    if (ex->top_logprobs >= 0 && !logits.empty())
      ex->held.logprobs.push_back(TokenLogprob(*tok, token, logits, ex->top_logprobs));
    const bool any = !ex->scratch.empty();
    {
      std::lock_guard lk(ex->mu);
      if (ex->first_token_at < 0) {
        ex->first_token_at = std::chrono::duration<double>(Clock::now() - ex->submitted).count();
      }
      ex->PushDeltas(ex->scratch, ex->held);
    }
    // Only a streaming reader has a use for new deltas; waking a non-streaming one per token
    // costs a futex call and a context switch per token on a machine whose cores are computing.
    if (ex->streaming && any) ex->cv.notify_all();
    return go;
  };
  if (ex->trace && ex->params.mode != decode::Mode::kAr) {
    sr.on_pass = [ex, tok](const decode::Generation& g) { TracePass(*ex, *tok, g); };
  }
  sr.on_done = [this, ex](const engine::RequestOutcome& o) {
    ex->scratch.clear();
    if (ex->force.triggered && ex->force.armed && o.error.empty()) {
      ex->force.armed = false;
      ex->first = o;
      ex->continued = true;
      ex->stream.Inject(ex->force.text, ex->scratch);
      ex->prompt.insert(ex->prompt.end(), o.output.begin(), o.output.end());
      ex->prompt.insert(ex->prompt.end(), ex->force.tokens.begin(), ex->force.tokens.end());
      ex->params.max_tokens -= static_cast<int64_t>(o.output.size() + ex->force.tokens.size());
      ex->params.think_open = false;
      ex->params.grammar = ex->force.grammar;  // the call is constrained, the reasoning was not
      std::lock_guard lk(ex->mu);
      ex->PushDeltas(ex->scratch, ex->held);
      if (!ex->cancelled && ex->params.max_tokens >= 1 &&
          static_cast<int64_t>(ex->prompt.size()) < n_ctx_slot) {
        try {
          ex->handle = SubmitPart(ex);  // the same prompt prefix: the slot's cache resumes it
          return;
        } catch (const Error&) {
          // Queue full or stopping: end with what there is.
        }
      }
      ex->continued = false;  // no continuation: the answer ends after the opening
    }
    ex->stream.Finish(ex->scratch);
    engine::RequestOutcome merged = o;
    if (ex->force.triggered && !ex->continued) {
      merged.output.insert(merged.output.end(), ex->force.tokens.begin(), ex->force.tokens.end());
      merged.finish =
          ex->cancelled ? decode::FinishReason::kCancelled : decode::FinishReason::kLength;
    } else if (ex->continued) {
      // One answer for the client: the reasoning part, the forced opening, the call.
      merged = ex->first;
      merged.output.insert(merged.output.end(), ex->force.tokens.begin(), ex->force.tokens.end());
      merged.output.insert(merged.output.end(), o.output.begin(), o.output.end());
      merged.finish =
          o.finish == decode::FinishReason::kNone ? decode::FinishReason::kLength : o.finish;
      merged.stats = o.stats;
      merged.error = o.error;
      merged.client_error = o.client_error;
      merged.total_seconds = std::chrono::duration<double>(Clock::now() - ex->submitted).count();
    }
    request_metrics.OnRequestDone(merged, ex->first_token_at);  // once per client request
    {
      std::lock_guard lk(ex->mu);
      ex->PushDeltas(ex->scratch, ex->held);
      // Tokens whose text never showed (an end-of-generation token, a stop string's tail): their
      // entries go with the end.
      for (auto& e : ex->held.logprobs) ex->logprobs.push_back(std::move(e));
      ex->held = {};
      ex->outcome = std::move(merged);
      ex->stopped = ex->stream.stopped_by_string();
      ex->stop_string = ex->stream.stop_string();
      ex->done = true;
    }
    ex->cv.notify_all();
  };
  return scheduler->Submit(std::move(sr));
}

void Server::Impl::Generate(const http::Request& req, http::Response& res, GenerationJob job) {
  // Counted until the answer is handed over (a stream: until its last chunk); a drain waits for 0.
  ++in_flight;
  const std::shared_ptr<void> in_flight_guard(nullptr, [this](void*) { --in_flight; });
  if (draining.load())
    throw ApiError(503, "unavailable_error", "", "the server is shutting down; retry elsewhere");
  // One exchange per choice: each prompt (several on /v1/completions) n times (OpenAI `n`).
  std::vector<std::vector<int32_t>> prompts{std::move(job.prompt)};
  for (auto& p : job.more_prompts) prompts.push_back(std::move(p));
  const int n = std::max(1, job.gen.n);
  for (const auto& p : prompts) {
    const int64_t n_prompt = static_cast<int64_t>(p.size());
    if (n_prompt >= n_ctx_slot) {
      throw ApiError(
          400, "invalid_request_error", job.prompt_param,
          fmt::format(
              "the prompt has {} tokens but a slot's context holds {} (prompt + answer); shorten "
              "it or start the server with a larger -c",
              n_prompt, n_ctx_slot),
          "context_length_exceeded");
    }
  }
  decode::DecodeParams& params = job.gen.params;
  if (params.mode != decode::Mode::kAr && params.block_size > scheduler->options().max_block_size) {
    BadRequest("crossword.block_size",
               fmt::format("block_size {} exceeds this server's --max-block-size {}",
                           params.block_size, scheduler->options().max_block_size));
  }
  if (params.mode != decode::Mode::kAr && job.gen.logprobs >= 0) {
    BadRequest("logprobs", "logprobs are available in mode \"ar\" only");
  }
  if (params.mode != decode::Mode::kAr && params.mask_id < 0) {
    BadRequest("crossword.mode", "this model has no mask token: only mode \"ar\" is available");
  }

  std::vector<std::shared_ptr<Exchange>> exs;
  auto cancel_all = [&exs] {
    for (auto& e : exs) e->Cancel();
  };
  for (size_t pi = 0; pi < prompts.size(); ++pi) {
    for (int c = 0; c < n; ++c) {
      auto ex = std::make_shared<Exchange>(engine->tokenizer(), job.output);
      ex->stream.Begin(ex->deltas);
      ex->delta_tokens.resize(ex->deltas.size());
      ex->force = job.force;
      ex->prompt = prompts[pi];
      ex->params = params;
      if (!job.gen.max_tokens_given)
        ex->params.max_tokens = n_ctx_slot - static_cast<int64_t>(prompts[pi].size());
      // The copies of one prompt sample apart (with a request seed: seed, seed + 1, ...).
      ex->params.sampling.seed += static_cast<uint64_t>(c);
      ex->use_cache = job.gen.cache_prompt;
      ex->streaming = job.gen.stream;
      ex->trace = job.gen.stream && job.gen.trace;
      ex->top_logprobs = job.gen.logprobs;
      ex->submitted = Clock::now();
      exs.push_back(ex);
      try {
        auto handle = SubmitPart(ex);
        std::lock_guard lk(ex->mu);
        if (!ex->handle) ex->handle = std::move(handle);  // unless a continuation already runs
      } catch (const Error& e) {
        cancel_all();
        throw ApiError(503, "unavailable_error", "", e.what());
      }
    }
  }
  const size_t k = exs.size();

  WriterContext wc;
  wc.id = NewId(job.id_prefix);
  wc.created = std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
  wc.model = model_name;
  wc.mode = params.mode;
  wc.temperature = params.sampling.temperature;
  wc.top_p = params.sampling.top_p;
  wc.include_usage = job.gen.include_usage;
  wc.logprobs = job.gen.logprobs >= 0;
  wc.new_id = [this](const char* prefix) { return NewId(prefix); };
  if (const auto te = engine->tokenizer().special().think_end) wc.think_end = *te;
  const std::string id = wc.id;
  std::vector<std::shared_ptr<ProtocolWriter>> writers;
  for (size_t i = 0; i < k; ++i) {
    WriterContext w = wc;
    w.index = static_cast<int>(i);
    w.last = i + 1 == k;
    w.prompt_tokens = static_cast<int64_t>(exs[i]->prompt.size());
    writers.push_back(job.writer(std::move(w)));
  }
  const decode::Mode mode = params.mode;
  const std::string prompt_text = std::move(job.prompt_text);
  auto log_line = [this, mode, id, prompt_text, k](const Exchange& e, const char* how) {
    const auto& o = e.outcome;
    const Timings t = TimingsOf(o, e.first_token_at);
    const double tps =
        o.output.size() > 1 && t.gen_s > 0 ? static_cast<double>(o.output.size() - 1) / t.gen_s : 0;
    std::string s = fmt::format(
        "| {} {} slot {} prompt {} (cached {}) out {} finish {} | queue {:.3f} s prompt "
        "{:.3f} s gen {:.3f} s {:.1f} tokens/s | {} {:.2f} tokens/pass",
        how, id, o.slot, o.prompt_tokens, o.cached_tokens, o.output.size(),
        decode::FinishReasonName(o.finish), t.queue_s, t.prompt_s, t.gen_s, tps,
        decode::ModeName(mode), o.stats.tokens_per_pass());
    if (k > 1) s += fmt::format(" | {} choices", k);
    if (!o.error.empty()) s += " | error: " + o.error;
    if (options.log_prompts) {
      log.Info("{} prompt: {}", id, prompt_text);
    }
    return s;
  };
  // Usage over every choice (OpenAI: each distinct prompt counted once). Under each lock.
  auto total_usage = [exs, n]() {
    int64_t prompt = 0, cached = 0, out = 0;
    for (size_t i = 0; i < exs.size(); ++i) {
      std::lock_guard lk(exs[i]->mu);
      const auto& o = exs[i]->outcome;
      if (i % static_cast<size_t>(n) == 0) {
        prompt += o.prompt_tokens;
        cached += o.cached_tokens;
      }
      out += static_cast<int64_t>(o.output.size());
    }
    return json{{"prompt_tokens", prompt},
                {"completion_tokens", out},
                {"total_tokens", prompt + out},
                {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  };

  if (!job.gen.stream) {
    for (const auto& ex : exs) {
      for (;;) {
        std::unique_lock lk(ex->mu);
        if (ex->cv.wait_for(lk, kPoll, [&] { return ex->done; })) break;
        lk.unlock();
        if (stopping.load()) {
          cancel_all();
          SetLogExtra(req, fmt::format("| {} server stopping, cancelled", id));
          throw ApiError(503, "server_error", "", "the server is shutting down");
        }
        if (req.PeerClosed()) {
          cancel_all();
          SetLogExtra(req, fmt::format("| {} client gone, cancelled", id));
          throw ApiError(499, "invalid_request_error", "", "the client closed the connection");
        }
      }
    }
    const json usage = k > 1 ? total_usage() : json();
    json body;
    for (size_t i = 0; i < k; ++i) {
      Exchange& ex = *exs[i];
      std::lock_guard lk(ex.mu);
      if (!ex.outcome.error.empty()) {
        SetLogExtra(req, log_line(ex, "failed"));
        throw GenerationError(ex.outcome);
      }
      std::vector<json> all_lps;
      for (auto& t : ex.delta_tokens) {
        for (auto& e : t.logprobs) all_lps.push_back(std::move(e));
      }
      for (auto& e : ex.logprobs) all_lps.push_back(std::move(e));
      Finished f{ex.outcome, ex.first_token_at, ex.stop_string, std::move(all_lps), usage};
      json b = writers[i]->Final(ex.deltas, f);
      if (i == 0) {
        body = std::move(b);
      } else {
        body["choices"].push_back(b["choices"][0]);
      }
      if (options.log_prompts) {
        MessageBuilder mb;
        for (const auto& d : ex.deltas) mb.Add(d);
        log.Info("{} answer: {}{}", id,
                 mb.reasoning.empty() ? "" : "[reasoning] " + mb.reasoning + " [/reasoning] ",
                 mb.content);
      }
    }
    res.set_content(Dump(body), "application/json");
    {
      std::lock_guard lk(exs[0]->mu);
      SetLogExtra(req, log_line(*exs[0], "done"));
    }
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, exs, writers, &req, log_line, id, total_usage, k](size_t, http::DataSink& sink) {
        auto write = [&](const std::string& s) {
          return s.empty() || sink.write(s.data(), s.size());
        };
        auto gone = [&](const char* why) {
          for (auto& e : exs) e->Cancel();
          SetLogExtra(req, fmt::format("| {} {}, cancelled", id, why));
          return false;
        };
        std::string head;
        for (auto& w : writers) head += w->Head();
        if (!write(head)) return gone("client gone");
        std::vector<std::vector<json>> lp_pending(k);
        std::vector<bool> finished(k, false);
        for (;;) {
          bool all_done = true, any = false;
          std::string events;
          for (size_t c = 0; c < k; ++c) {
            Exchange& ex = *exs[c];
            std::vector<chat::StreamDelta> got;
            std::vector<DeltaTokens> got_tokens;
            std::vector<PassTrace> traces;
            {
              std::unique_lock lk(ex.mu);
              if (k == 1) {
                ex.cv.wait_for(lk, kPoll,
                               [&] { return !ex.deltas.empty() || !ex.traces.empty() || ex.done; });
              }
              got.swap(ex.deltas);
              got_tokens.swap(ex.delta_tokens);
              traces.swap(ex.traces);
              finished[c] = ex.done;
            }
            any = any || !got.empty() || !traces.empty();
            all_done = all_done && finished[c];
            // One delta at a time, each with the tokens (and logprobs) whose text it shows
            // first: several deltas taken at once must not put all their entries on the first.
            for (size_t i = 0; i < got.size(); ++i) {
              DeltaTokens& t = got_tokens[i];
              for (auto& e : t.logprobs) lp_pending[c].push_back(std::move(e));
              writers[c]->NoteTokens(t.ids);
              events += writers[c]->Deltas(std::span(got).subspan(i, 1), lp_pending[c]);
            }
            for (const auto& t : traces) events += writers[c]->Trace(t);
          }
          if (!write(events)) return gone("client gone");
          if (all_done) break;
          if (stopping.load()) {
            // Shutting down: the client gets a proper end (an error event, and [DONE] where the
            // protocol has one), not a connection cut mid-stream.
            for (auto& e : exs) e->Cancel();
            SetLogExtra(req, fmt::format("| {} server stopping, cancelled", id));
            write(writers.back()->StreamError(ApiError(
                503, "server_error", "", "the server is shutting down; the answer is cut")));
            sink.done();
            return true;
          }
          if (req.PeerClosed()) return gone("client gone");
          if (k > 1 && !any) {  // several choices: wait a little on the first unfinished one
            for (size_t c = 0; c < k; ++c) {
              if (finished[c]) continue;
              std::unique_lock lk(exs[c]->mu);
              exs[c]->cv.wait_for(lk, std::chrono::milliseconds(5));
              break;
            }
          }
        }
        const json usage = k > 1 ? total_usage() : json();
        std::string tail;
        for (size_t c = 0; c < k; ++c) {
          Exchange& ex = *exs[c];
          std::lock_guard lk(ex.mu);
          if (!ex.outcome.error.empty()) {
            tail += writers[c]->StreamError(GenerationError(ex.outcome));
            SetLogExtra(req, log_line(ex, "failed"));
            break;
          }
          for (auto& e : ex.logprobs) lp_pending[c].push_back(std::move(e));
          ex.logprobs.clear();
          Finished f{ex.outcome, ex.first_token_at, ex.stop_string, std::move(lp_pending[c]),
                     usage};
          tail += writers[c]->Tail(f);
          if (c == 0) SetLogExtra(req, log_line(ex, "done"));
        }
        if (!write(tail)) return false;
        sink.done();
        return true;
      },
      [exs, in_flight_guard](bool success) {
        (void)in_flight_guard;  // held until the transport releases the finished stream
        if (!success) {
          for (auto& e : exs) e->Cancel();
        }
      });
}

}  // namespace crossword::server
