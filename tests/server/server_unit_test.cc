// Unit tests of the server's parts without HTTP: stop strings against a brute-force reference,
// the output pipeline against the one-shot chat parser, request validation, and the scheduler and
// prompt cache against the engine's single-sequence loop (RunGeneration) on a synthesized model.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>

#include "chat/output_parser.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "server/api.h"
#include "server/cors.h"
#include "server/output.h"
#include "tools/synth.h"

namespace crossword::server {
namespace {

using json = nlohmann::ordered_json;

// ---- StopFilter ------------------------------------------------------------------------------

// What a stop filter must release in total: the text up to the earliest occurrence of any stop.
std::string Reference(const std::string& text, const std::vector<std::string>& stops) {
  size_t cut = std::string::npos;
  for (const auto& s : stops) cut = std::min(cut, text.find(s));
  return cut == std::string::npos ? text : text.substr(0, cut);
}

TEST(StopFilter, EveryChunkingReleasesExactlyTheTextBeforeTheFirstStop) {
  std::mt19937 rng(7);
  const std::string alphabet = "abc ";
  for (int round = 0; round < 400; ++round) {
    std::string text;
    for (int i = 0; i < 30; ++i) text += alphabet[rng() % alphabet.size()];
    std::vector<std::string> stops;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
      std::string s;
      for (int i = 0; i < 1 + static_cast<int>(rng() % 4); ++i)
        s += alphabet[rng() % alphabet.size()];
      stops.push_back(s);
    }
    const std::string want = Reference(text, stops);
    StopFilter f(stops);
    std::string got;
    for (size_t i = 0; i < text.size();) {
      const size_t n = 1 + rng() % 4;
      const std::string piece = f.Push(text.substr(i, n));
      got += piece;
      // Never ahead of the reference: nothing from a stop string is ever released.
      ASSERT_EQ(want.compare(0, got.size(), got), 0) << text;
      i += n;
    }
    got += f.Flush();
    ASSERT_EQ(got, want) << "text '" << text << "'";
    ASSERT_EQ(f.matched(), want.size() != text.size());
  }
}

TEST(StopFilter, HoldsBackOnlyWhatMayStillBecomeAStop) {
  StopFilter f({"</end>"});
  EXPECT_EQ(f.Push("hello </e"), "hello ");  // "</e" may continue as "</end>"
  EXPECT_EQ(f.Push("x"), "</ex");            // it did not: released at once
  EXPECT_EQ(f.Push("</en"), "");
  EXPECT_EQ(f.Flush(), "</en");  // released at the end
  StopFilter g({"ab"});
  EXPECT_EQ(g.Push("xa"), "x");
  EXPECT_EQ(g.Push("b tail"), "");
  EXPECT_TRUE(g.matched());
  EXPECT_EQ(g.Flush(), "");
}

// ---- A synthesized model shared by the tests below ---------------------------------------------

const std::string& ModelPath() {
  static const std::string path =
      tools::SynthesizeOnce({.preset = "tiny",
                             .layout = "official",
                             .arch = "clover_moe",
                             .output = ::testing::TempDir() + "/server_unit_tiny.gguf",
                             .threads = 2});
  return path;
}

const engine::Engine& TheEngine() {
  static const std::unique_ptr<engine::Engine> e = [] {
    engine::EngineOptions o;
    o.model_path = ModelPath();
    o.threads = 1;  // the machine is shared: a 2-thread pool waits on a busy core
    o.logger = Logger::Silent();
    return engine::Engine::Load(o);
  }();
  return *e;
}

// ---- OutputStream ----------------------------------------------------------------------------

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])");

MessageBuilder Feed(const std::string& text, OutputOptions o, int* stopped_at = nullptr) {
  const auto& tok = TheEngine().tokenizer();
  OutputStream s(tok, std::move(o));
  MessageBuilder mb;
  std::vector<chat::StreamDelta> out;
  s.Begin(out);
  const std::vector<int32_t> ids = tok.Encode(text, /*parse_special=*/true);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!s.OnToken(ids[i], out)) {
      if (stopped_at) *stopped_at = static_cast<int>(i);
      break;
    }
  }
  s.Finish(out);
  for (const auto& d : out) mb.Add(d);
  return mb;
}

void ExpectSame(const MessageBuilder& mb, const chat::ParsedOutput& p) {
  EXPECT_EQ(mb.reasoning, p.reasoning);
  EXPECT_EQ(mb.content, p.content);
  ASSERT_EQ(mb.calls.size(), p.tool_calls.size());
  for (size_t i = 0; i < mb.calls.size(); ++i) {
    EXPECT_EQ(mb.calls[i].name, p.tool_calls[i].name);
    EXPECT_EQ(mb.calls[i].arguments, p.tool_calls[i].ArgumentsJson());
  }
}

const std::string kAnswer =
    "I should check both cities.\n</think>\n\nLet me look.\n\n<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nLisbon\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</"
    "tool_call>\n"
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo "
    "\xE2\x9D\x84\n</parameter>\n</function>\n"
    "</tool_call>";

OutputOptions ChatOptions() {
  OutputOptions o;
  o.parse_options.thinking_opened = true;
  o.parse_options.tools = kTools;
  return o;
}

TEST(OutputStream, TokenByTokenEqualsTheOneShotParser) {
  const MessageBuilder mb = Feed(kAnswer, ChatOptions());
  ExpectSame(mb, chat::ParseOutput(kAnswer, ChatOptions().parse_options));
  ASSERT_EQ(mb.calls.size(), 2u);
  EXPECT_EQ(json::parse(mb.calls[1].arguments)["city"], "Oslo \xE2\x9D\x84");
  EXPECT_EQ(json::parse(mb.calls[0].arguments)["days"], 3);
}

TEST(OutputStream, StopStringCutsTheRawTextBeforeParsing) {
  for (const std::string stop :
       {"both", "\n</think>", "Lisbon", "</tool_call>\n<tool", "never there"}) {
    OutputOptions o = ChatOptions();
    o.stop = {stop};
    int stopped = -1;
    const MessageBuilder mb = Feed(kAnswer, o, &stopped);
    ExpectSame(mb, chat::ParseOutput(Reference(kAnswer, {stop}), o.parse_options));
    EXPECT_EQ(stopped >= 0, kAnswer.find(stop) != std::string::npos) << stop;
  }
}

TEST(OutputStream, SingleToolCallKeepsTheFirstAndEndsAtTheSecond) {
  OutputOptions o = ChatOptions();
  o.single_tool_call = true;
  int stopped = -1;
  const MessageBuilder mb = Feed(kAnswer, o, &stopped);
  ASSERT_EQ(mb.calls.size(), 1u);
  EXPECT_EQ(json::parse(mb.calls[0].arguments)["city"], "Lisbon");
  EXPECT_GT(stopped, 0);
}

TEST(OutputStream, ForcedPrefixIsParsedAsOutputAndRawModeKeepsEverything) {
  OutputOptions o = ChatOptions();
  o.parse_options.thinking_opened = false;
  o.forced_prefix = "<tool_call>\n<function=get_weather>\n";
  const MessageBuilder mb =
      Feed("<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>", o);
  ASSERT_EQ(mb.calls.size(), 1u);
  EXPECT_EQ(mb.calls[0].name, "get_weather");
  EXPECT_EQ(mb.calls[0].arguments, R"({"city":"Rome"})");
  OutputOptions raw;
  raw.parse = false;
  const MessageBuilder r = Feed(kAnswer, raw);
  EXPECT_EQ(r.content, kAnswer);
  EXPECT_TRUE(r.reasoning.empty());
}

// ---- Request validation ----------------------------------------------------------------------

RequestDefaults Defaults() {
  RequestDefaults d;
  d.params = TheEngine().DefaultDecodeParams();
  d.n_vocab = TheEngine().tokenizer().n_vocab();
  return d;
}

std::string ParamOf(const char* body) {
  try {
    ParseChatRequest(json::parse(body), Defaults());
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.param();
  }
  return "(accepted)";
}

TEST(Api, NormalizesMessagesAndAppliesFields) {
  const ChatRequest r = ParseChatRequest(json::parse(R"({"messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "part one "}, {"type": "text", "text": "part two"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "cold"}],
    "max_completion_tokens": 7, "temperature": 0.5, "seed": 3, "stop": "END", "top_k": 5,
    "crossword": {"mode": "spec", "block_size": 8, "draft_max": 5, "draft_p_min": 0.25}, "chat_template_kwargs": {"enable_thinking": false},
    "stream": true, "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 2})"),
                                         Defaults());
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "part one part two");
  EXPECT_EQ(r.messages[2]["content"], "");
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["arguments"]["city"], "Oslo");
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_TRUE(r.max_tokens_given);
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 0.5f);
  EXPECT_EQ(r.params.sampling.seed, 3u);
  EXPECT_EQ(r.params.sampling.top_k, 5);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.params.mode, decode::Mode::kSpec);
  EXPECT_EQ(r.params.block_size, 8);
  EXPECT_EQ(r.params.draft_max, 5);
  EXPECT_FLOAT_EQ(r.params.draft_p_min, 0.25f);
  EXPECT_EQ(r.kwargs["enable_thinking"], false);
  EXPECT_TRUE(r.stream && r.include_usage);
  EXPECT_EQ(r.logprobs, 2);
  // Model defaults stay where the request says nothing (Clover: presence 0.9, repetition 1.05).
  EXPECT_FLOAT_EQ(r.params.sampling.presence_penalty, Defaults().params.sampling.presence_penalty);
}

TEST(Api, RejectsBadFieldsNamingThem) {
  EXPECT_EQ(ParamOf(R"({"messages": []})"), "messages");
  EXPECT_EQ(ParamOf(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"),
            "messages[0].content[0].type");
  EXPECT_EQ(ParamOf(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})"),
            "max_tokens");
  EXPECT_EQ(ParamOf(R"({"messages": [{"role": "user", "content": "x"}], "seed": "1"})"), "seed");
  EXPECT_EQ(ParamOf(R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a", ""]})"),
            "stop[1]");
  EXPECT_EQ(
      ParamOf(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})"),
      "tool_choice");
  EXPECT_EQ(ParamOf(R"({"messages": [{"role": "user", "content": "x"}], "threshold": 0})"),
            "threshold");
  EXPECT_EQ(ParamOf(R"({"messages": [{"role": "user", "content": "x"}], "draft_max": -1})"),
            "draft_max");
  EXPECT_EQ(
      ParamOf(
          R"({"messages": [{"role": "user", "content": "x"}], "crossword": {"draft_p_min": 1.5}})"),
      "crossword.draft_p_min");
  EXPECT_EQ(ParamOf(R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"-1": 2}})"),
            "logit_bias.-1");
  EXPECT_EQ(ParamOf(R"({"messages": [{"role": "user", "content": "x"}], "whatever": [1]})"),
            "(accepted)");
  EXPECT_THROW(ParseBody("{\"max_tokens\": 1e999}"), ApiError);  // beyond double: 400, not 500
  // The parser's messages reach the client without the library's exception tags.
  for (const char* body : {"{\"max_tokens\": 1e999}", "{\"temperature\": NaN}"}) {
    try {
      ParseBody(body);
      ADD_FAILURE() << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(std::string(e.what()).find("json.exception"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("the request body"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(ParseBody("{\"a\": \"\\udfff\"}"), ApiError);
  EXPECT_THROW(ParseBody("{\"a\": \"\xC0\xAF\"}"), ApiError);  // overlong encoding
}

// ---- Scheduler and prompt cache ----------------------------------------------------------------

struct Result {
  std::vector<int32_t> tokens;
  engine::RequestOutcome outcome;
  bool done = false;
};

// Submits requests and waits for all of them.
class Runner {
 public:
  explicit Runner(engine::Scheduler& s) : s_(s) {}
  std::shared_ptr<engine::RequestHandle> Submit(std::vector<int32_t> prompt, decode::DecodeParams p,
                                                Result* r) {
    engine::ScheduledRequest q;
    q.prompt = std::move(prompt);
    q.params = std::move(p);
    q.on_token = [r](int32_t t, std::span<const float>) {
      r->tokens.push_back(t);
      return true;
    };
    q.on_done = [this, r](const engine::RequestOutcome& o) {
      std::lock_guard lk(mu_);
      r->outcome = o;
      r->done = true;
      cv_.notify_all();
    };
    return s_.Submit(std::move(q));
  }
  void Wait(const std::vector<Result*>& rs) {
    std::unique_lock lk(mu_);
    cv_.wait(lk,
             [&] { return std::all_of(rs.begin(), rs.end(), [](Result* r) { return r->done; }); });
  }

 private:
  engine::Scheduler& s_;
  std::mutex mu_;
  std::condition_variable cv_;
};

std::vector<int32_t> Prompt(const std::string& text) {
  return TheEngine()
      .EncodeChat(json::array({{{"role", "user"}, {"content", text}}}), json::array(),
                  json::object())
      .tokens;
}

// The reference: the engine's own single-sequence loop on a fresh state.
std::vector<int32_t> Alone(const std::vector<int32_t>& prompt, const decode::DecodeParams& p) {
  auto state = TheEngine().NewState(1024);
  std::vector<int32_t> out;
  engine::RunGeneration(TheEngine(), *state, prompt, p, [&](int32_t t) {
    out.push_back(t);
    return true;
  });
  return out;
}

decode::DecodeParams Params(decode::Mode mode, int64_t n) {
  decode::DecodeParams p = TheEngine().DefaultDecodeParams();
  p.mode = mode;
  p.block_size = 8;
  p.max_tokens = n;
  p.eog_ids.clear();  // fixed lengths
  return p;
}

engine::SchedulerOptions Options(int slots) {
  engine::SchedulerOptions o;
  o.n_slots = slots;
  o.n_ctx = 1024;
  o.cache.interval = 16;
  // Room for every checkpoint of the follow-up test's three prompts (each also keeps one before
  // its last token since issue 23), so none of the first prompt's is evicted.
  o.cache.max_checkpoints = 16;
  return o;
}

TEST(Scheduler, BatchedRequestsEqualTheSingleSequenceLoop) {
  engine::Scheduler s(TheEngine(), Options(3));
  Runner run(s);
  const decode::Mode modes[] = {decode::Mode::kAr, decode::Mode::kDiffusion, decode::Mode::kSpec};
  std::vector<Result> results(7);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Result*> all;
  for (size_t i = 0; i < results.size(); ++i) {
    prompts.push_back(Prompt("question number " + std::to_string(i) + std::string(i, '!')));
    run.Submit(prompts[i], Params(modes[i % 3], 20 + static_cast<int64_t>(i)), &results[i]);
    all.push_back(&results[i]);
  }
  run.Wait(all);
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_TRUE(results[i].outcome.error.empty()) << results[i].outcome.error;
    EXPECT_EQ(results[i].outcome.finish, decode::FinishReason::kLength);
    EXPECT_EQ(results[i].tokens, results[i].outcome.output);
    EXPECT_EQ(results[i].tokens,
              Alone(prompts[i], Params(modes[i % 3], 20 + static_cast<int64_t>(i))))
        << i;
  }
  const engine::SchedulerMetrics m = s.Metrics();
  EXPECT_EQ(m.requests_finished, 7);
  EXPECT_GT(m.forward_sequences, m.forward_passes);  // passes were shared
  EXPECT_EQ(m.slots_busy, 0);
}

TEST(Scheduler, FollowUpResumesFromTheLiveStateOrACheckpointAndMatchesColdRuns) {
  engine::Scheduler s(TheEngine(), Options(1));
  Runner run(s);
  const auto p = Params(decode::Mode::kAr, 12);
  const std::vector<int32_t> a = Prompt("tell me a story about a lighthouse keeper and a storm");
  Result ra;
  run.Submit(a, p, &ra);
  run.Wait({&ra});
  // Extending what the state holds: resume from the live state (all but the last answer token).
  std::vector<int32_t> b = a;
  b.insert(b.end(), ra.tokens.begin(), ra.tokens.end());
  for (int32_t t : Prompt("and then?")) b.push_back(t);
  Result rb;
  run.Submit(b, p, &rb);
  run.Wait({&rb});
  EXPECT_EQ(rb.outcome.cached_tokens, static_cast<int64_t>(a.size() + ra.tokens.size()) - 1);
  EXPECT_EQ(rb.tokens, Alone(b, p));
  // Diverging inside the first prompt: the latest checkpoint at or before the divergence.
  const size_t d = a.size() - 7;
  std::vector<int32_t> c(a.begin(), a.begin() + static_cast<ptrdiff_t>(d));
  for (int32_t t : Prompt("something else entirely")) c.push_back(t);
  Result rc;
  run.Submit(c, p, &rc);
  run.Wait({&rc});
  // Checkpoints of the first prompt: every 16 tokens and before its last <|im_start|>.
  const int32_t im_start = *TheEngine().tokenizer().special().im_start;
  const int64_t last_turn = std::find(a.rbegin(), a.rend(), im_start).base() - a.begin() - 1;
  int64_t expect = static_cast<int64_t>(d) / 16 * 16;
  if (last_turn <= static_cast<int64_t>(d)) expect = std::max(expect, last_turn);
  EXPECT_EQ(rc.outcome.cached_tokens, expect);
  EXPECT_EQ(rc.tokens, Alone(c, p));
}

// `--draft-max auto` on a server: a slot's next greedy spec request starts from the draft-length
// controller its last one ended with (Generation::CarriedDraftControl), which changes no token;
// a sampled request ignores it, so its seed still reproduces it (its draft lengths decide its
// random draws). Whether the carried controller drafts more or less than a fresh one depends on
// the pass times measured, so decode_test checks that part with given costs.
TEST(Scheduler, SpecAutoRequestsOnAUsedSlotAnswerAsAlone) {
  auto params = [](int64_t n, float temperature) {
    decode::DecodeParams p = Params(decode::Mode::kSpec, n);
    p.block_size = 16;
    p.draft_auto = true;
    p.sampling.temperature = temperature;
    p.sampling.seed = 7;
    return p;
  };
  engine::Scheduler s(TheEngine(), Options(1));
  Runner run(s);
  const std::vector<int32_t> prompts[] = {Prompt("a first question about rivers"),
                                          Prompt("and a second one about mountains"),
                                          Prompt("and a third, sampled, about the sea")};
  const decode::DecodeParams ps[] = {params(30, 0), params(12, 0), params(24, 0.8f)};
  for (int i = 0; i < 3; ++i) {
    Result r;
    run.Submit(prompts[i], ps[i], &r);
    run.Wait({&r});
    EXPECT_TRUE(r.outcome.error.empty()) << r.outcome.error;
    EXPECT_EQ(r.tokens, Alone(prompts[i], ps[i])) << i;
    EXPECT_GT(r.outcome.stats.rounds, 0) << i;
  }
}

TEST(Scheduler, ACallerStopIsAStopNotACancellation) {
  // A stop string ends the request through on_token returning false: finish "stop", counted as
  // finished (issue 24: it was logged and counted as cancelled). Cancel() stays a cancellation.
  engine::Scheduler s(TheEngine(), Options(1));
  std::mutex mu;
  std::condition_variable cv;
  std::vector<engine::RequestOutcome> outcomes;
  auto submit = [&](bool stop_by_token) {
    engine::ScheduledRequest q;
    q.prompt = Prompt("count to ten");
    q.params = Params(decode::Mode::kAr, 30);
    auto n = std::make_shared<int>(0);
    q.on_token = [n, stop_by_token](int32_t, std::span<const float>) {
      return !(stop_by_token && ++*n == 3);
    };
    q.on_done = [&](const engine::RequestOutcome& o) {
      std::lock_guard lk(mu);
      outcomes.push_back(o);
      cv.notify_all();
    };
    return s.Submit(std::move(q));
  };
  submit(true);
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return outcomes.size() == 1; });
  }
  EXPECT_EQ(outcomes[0].finish, decode::FinishReason::kStop);
  EXPECT_EQ(outcomes[0].output.size(), 3u);
  auto h = submit(false);
  h->Cancel();
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return outcomes.size() == 2; });
  }
  EXPECT_EQ(outcomes[1].finish, decode::FinishReason::kCancelled);
  const engine::SchedulerMetrics m = s.Metrics();
  EXPECT_EQ(m.requests_finished, 1);
  EXPECT_EQ(m.requests_cancelled, 1);
}

TEST(Scheduler, ReportsPrefillProgressOfLongPrompts) {
  struct Call {
    int slot;
    int64_t done, total;
    double seconds;
  };
  std::vector<Call> calls;  // written on the scheduler thread, read after the request is done
  engine::SchedulerOptions o = Options(1);
  o.batch_tokens = 32;
  o.on_prefill = [&](int slot, int64_t done, int64_t total, double seconds) {
    calls.push_back({slot, done, total, seconds});
  };
  engine::Scheduler s(TheEngine(), o);
  Runner run(s);
  std::string text;
  for (int i = 0; i < 30; ++i) text += "word " + std::to_string(i) + ", ";
  const std::vector<int32_t> prompt = Prompt(text);
  ASSERT_GT(prompt.size(), 100u);
  Result r;
  run.Submit(prompt, Params(decode::Mode::kAr, 2), &r);
  run.Wait({&r});
  ASSERT_GE(calls.size(), 3u);  // one per prefill pass of 32 tokens
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].slot, 0);
    EXPECT_EQ(calls[i].total, static_cast<int64_t>(prompt.size()));
    EXPECT_GE(calls[i].seconds, 0.0);
    if (i > 0) {
      EXPECT_GT(calls[i].done, calls[i - 1].done);
    }
  }
  // The scheduler prefills all but the last prompt token (the generation's first step takes it).
  EXPECT_EQ(calls.back().done, static_cast<int64_t>(prompt.size()) - 1);
}

// ---- CORS --------------------------------------------------------------------------------------

TEST(Cors, LocalhostOriginsAreRecognizedWithOrWithoutSchemeAndPort) {
  for (const char* o : {"localhost", "http://localhost", "http://localhost:8080",
                        "https://127.0.0.1", "http://[::1]:3000", "http://localhost/"}) {
    EXPECT_TRUE(OriginIsLocalhost(o)) << o;
  }
  for (const char* o :
       {"", "http://localhost.evil.example", "http://evil.example/localhost", "http://127.0.0.2",
        "http://[::2]", "http://localhost:80x", "http://user@localhost"}) {
    EXPECT_FALSE(OriginIsLocalhost(o)) << o;
  }
}

TEST(Cors, AllowedOriginFollowsTheFlags) {
  ServerOptions::Cors c;  // localhost by default
  EXPECT_EQ(AllowedOrigin(c, "http://localhost:5173"), "http://localhost:5173");
  EXPECT_EQ(AllowedOrigin(c, "https://evil.example"), "");
  EXPECT_EQ(AllowedOrigin(c, ""), "");
  c.origins = "*";
  EXPECT_EQ(AllowedOrigin(c, "https://a.example"), "https://a.example");  // credentials: reflect
  EXPECT_EQ(AllowedOrigin(c, ""), "*");
  c.credentials = false;
  EXPECT_EQ(AllowedOrigin(c, "https://a.example"), "*");
  c.origins = "https://a.example, https://b.example";
  EXPECT_EQ(AllowedOrigin(c, "https://b.example"), "https://b.example");
  EXPECT_EQ(AllowedOrigin(c, "https://b.example.evil"), "");
  const auto h = CorsHeaders(c, "https://a.example", /*preflight=*/true);
  ASSERT_EQ(h.size(), 5u);  // origin, Vary, credentials, methods, headers
  EXPECT_EQ(h[0].second, "https://a.example");
  EXPECT_EQ(h[2].second, "false");
  EXPECT_EQ(CorsHeaders(c, "https://z.example", /*preflight=*/false).size(), 0u);
}

TEST(Scheduler, AnIdenticalShortPromptReRunsOnlyItsLastToken) {
  // Shorter than the checkpoint interval and without a chat turn: before issue 23's fix nothing
  // of it was reused (no checkpoint fell inside it and the live state holds the answer too).
  engine::Scheduler s(TheEngine(), Options(1));
  Runner run(s);
  const auto p = Params(decode::Mode::kAr, 10);
  const std::vector<int32_t> a = TheEngine().tokenizer().Encode("a lighthouse in the storm", false);
  ASSERT_LT(a.size(), 16u);
  Result r1, r2;
  run.Submit(a, p, &r1);
  run.Wait({&r1});
  run.Submit(a, p, &r2);
  run.Wait({&r2});
  EXPECT_EQ(r2.outcome.cached_tokens, static_cast<int64_t>(a.size()) - 1);
  EXPECT_EQ(r2.tokens, r1.tokens);
  EXPECT_EQ(r2.tokens, Alone(a, p));
}

TEST(Scheduler, CancellingAQueuedRequestLeavesTheRunningOneAlone) {
  engine::Scheduler s(TheEngine(), Options(1));
  Runner run(s);
  const auto p = Params(decode::Mode::kAr, 40);
  const auto prompt = Prompt("a long answer please");
  Result running, queued;
  run.Submit(prompt, p, &running);
  auto h = run.Submit(Prompt("queued"), p, &queued);
  h->Cancel();
  run.Wait({&running, &queued});
  EXPECT_EQ(queued.outcome.finish, decode::FinishReason::kCancelled);
  EXPECT_TRUE(queued.tokens.empty());
  EXPECT_EQ(running.outcome.finish, decode::FinishReason::kLength);
  EXPECT_EQ(running.tokens, Alone(prompt, p));
}

TEST(Scheduler, RefusesWhatCanNeverRun) {
  engine::Scheduler s(TheEngine(), Options(1));
  engine::ScheduledRequest q;
  q.params = Params(decode::Mode::kAr, 4);
  EXPECT_THROW(s.Submit(q), Error);  // empty prompt
  q.prompt.assign(1024, 1);
  EXPECT_THROW(s.Submit(q), Error);  // no room for an answer
  q.prompt.assign(4, 1);
  q.params = Params(decode::Mode::kDiffusion, 4);
  q.params.block_size = 200;
  EXPECT_THROW(s.Submit(q), Error);  // block larger than the server's largest
}

}  // namespace
}  // namespace crossword::server
