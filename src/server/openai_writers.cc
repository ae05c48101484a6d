// Protocol writers for OpenAI's /v1/chat/completions and /v1/completions (the chunk and body
// shapes the official openai client parses), plus the helpers every writer shares.
#include <algorithm>

#include "server/exchange.h"

namespace crossword::server {

using json = nlohmann::ordered_json;
using Kind = chat::StreamDelta::Kind;

Timings TimingsOf(const engine::RequestOutcome& o, double first_token_at) {
  Timings t;
  t.queue_s = o.queue_seconds;
  const double first = first_token_at >= 0 ? first_token_at : o.total_seconds;
  t.prompt_s = std::max(0.0, first - o.queue_seconds);
  t.gen_s = std::max(0.0, o.total_seconds - first);
  return t;
}

json UsageJson(const engine::RequestOutcome& o) {
  const int64_t out = static_cast<int64_t>(o.output.size());
  return {{"prompt_tokens", o.prompt_tokens},
          {"completion_tokens", out},
          {"total_tokens", o.prompt_tokens + out},
          {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
}

json TimingsJson(const Finished& f, decode::Mode mode) {
  const auto& o = f.outcome;
  const Timings t = TimingsOf(o, f.first_token_at);
  const int64_t n = static_cast<int64_t>(o.output.size());
  return {
      {"cache_n", o.cached_tokens},
      {"prompt_n", o.prompt_tokens - o.cached_tokens},
      {"prompt_ms", t.prompt_s * 1e3},
      {"predicted_n", n},
      {"predicted_ms", t.gen_s * 1e3},
      {"predicted_per_second", n > 1 && t.gen_s > 0 ? static_cast<double>(n - 1) / t.gen_s : 0.0},
      {"queue_ms", t.queue_s * 1e3},
      {"mode", decode::ModeName(mode)},
      {"forward_passes", o.stats.forward_passes()},
      {"tokens_per_pass", o.stats.tokens_per_pass()},
      {"rounds", o.stats.rounds},
      {"mean_accepted", o.stats.mean_accepted()},
      {"verify_rows", o.stats.verify_rows},
      {"verify_logit_rows", o.stats.verify_logit_rows},
      // Mean distinct routed experts per MoE layer per pass (the expert union U) by pass kind;
      // in a batch, the batch's.
      {"experts_per_layer",
       {{"ar", o.stats.ar_passes ? o.stats.ar_experts / o.stats.ar_passes : 0.0},
        {"denoise",
         o.stats.denoise_passes ? o.stats.denoise_experts / o.stats.denoise_passes : 0.0},
        {"commit", o.stats.commit_passes ? o.stats.commit_experts / o.stats.commit_passes : 0.0}}}};
}

json TraceJson(const PassTrace& t) {
  return {{"pass", t.pass},           {"block", t.block},
          {"phase", t.phase},         {"slots", t.slots},
          {"committed", t.committed}, {"drafted", t.drafted},
          {"accepted", t.accepted},   {"tokens_per_pass", t.tokens_per_pass}};
}

std::string Sse(const json& j) { return "data: " + Dump(j) + "\n\n"; }

std::string NamedSse(const std::string& event, const json& j) {
  return "event: " + event + "\ndata: " + Dump(j) + "\n\n";
}

namespace {

std::string FinishReasonText(const Finished& f, int n_calls) {
  if (f.outcome.finish == decode::FinishReason::kLength) return "length";
  return n_calls > 0 ? "tool_calls" : "stop";
}

// Chat: {"content": [entries]}; completions: the legacy parallel lists. `offset` is where the
// first entry's text starts in the answer, in code points (vLLM's convention without echo), and
// advances past these entries: a stream passes the same counter for every chunk.
json LogprobsJson(bool chat, const std::vector<json>& entries, int64_t& offset) {
  if (chat) return {{"content", entries}, {"refusal", nullptr}};
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const auto& e : entries) {
    tokens.push_back(e["token"]);
    lps.push_back(e["logprob"]);
    json t = json::object();
    for (const auto& a : e["top_logprobs"]) t[a["token"].get<std::string>()] = a["logprob"];
    tops.push_back(t);
    offsets.push_back(offset);
    // Code points = UTF-8 bytes that are not continuation bytes (10xxxxxx).
    for (const auto& b : e["bytes"]) offset += (b.get<int>() & 0xC0) != 0x80 ? 1 : 0;
  }
  return {{"tokens", tokens},
          {"token_logprobs", lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

// Both OpenAI endpoints: one shape of chunk, one of body, differing in the choice's fields.
class OpenAiWriter : public ProtocolWriter {
 public:
  OpenAiWriter(WriterContext c, bool chat) : c_(std::move(c)), chat_(chat) {}

  json Final(std::span<const chat::StreamDelta> deltas, Finished& f) override {
    MessageBuilder mb;
    for (const auto& d : deltas) mb.Add(d);
    const std::string finish = FinishReasonText(f, static_cast<int>(mb.calls.size()));
    json choice;
    if (chat_) {
      json msg = {{"role", "assistant"}, {"content", mb.content}};
      if (!mb.reasoning.empty()) msg["reasoning_content"] = mb.reasoning;
      if (!mb.calls.empty()) {
        json calls = json::array();
        for (const auto& call : mb.calls) {
          calls.push_back({{"id", c_.new_id("call_")},
                           {"type", "function"},
                           {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        }
        msg["tool_calls"] = calls;
        if (mb.content.empty()) msg["content"] = nullptr;
      }
      choice = {
          {"index", c_.index}, {"message", msg}, {"logprobs", nullptr}, {"finish_reason", finish}};
    } else {
      choice = {{"text", mb.content},
                {"index", c_.index},
                {"logprobs", nullptr},
                {"finish_reason", finish}};
    }
    if (c_.logprobs) {
      int64_t offset = 0;
      choice["logprobs"] = LogprobsJson(chat_, f.logprobs, offset);
    }
    json body = Envelope(chat_ ? "chat.completion" : "text_completion");
    body["choices"] = json::array({choice});
    body["usage"] = f.usage.is_null() ? UsageJson(f.outcome) : f.usage;
    body["timings"] = TimingsJson(f, c_.mode);
    return body;
  }

  std::string Head() override {
    return chat_ ? Sse(Chunk({{"role", "assistant"}, {"content", ""}}, nullptr)) : "";
  }

  std::string Deltas(std::span<const chat::StreamDelta> deltas, std::vector<json>& lp) override {
    std::string out;
    auto with_logprobs = [&](json c) {
      if (c_.logprobs && !lp.empty()) {
        c["choices"][0]["logprobs"] = LogprobsJson(chat_, lp, text_offset_);
        lp.clear();
      }
      return c;
    };
    for (const auto& d : deltas) {
      if (!chat_) {
        out += Sse(with_logprobs(Chunk(d.text, nullptr)));
        continue;
      }
      json delta;
      switch (d.kind) {
        case Kind::kContent:
          delta = {{"content", d.text}};
          break;
        case Kind::kReasoning:
          delta = {{"reasoning_content", d.text}};
          break;
        case Kind::kToolCallStart:
          call_ids_.push_back(c_.new_id("call_"));
          delta = {
              {"tool_calls", json::array({{{"index", d.index},
                                           {"id", call_ids_.back()},
                                           {"type", "function"},
                                           {"function", {{"name", d.name}, {"arguments", ""}}}}})}};
          break;
        case Kind::kToolCallArguments:
          delta = {{"tool_calls",
                    json::array({{{"index", d.index}, {"function", {{"arguments", d.text}}}}})}};
          break;
      }
      out += Sse(with_logprobs(Chunk(std::move(delta), nullptr)));
    }
    return out;
  }

  std::string Trace(const PassTrace& t) override {
    json c = Chunk(chat_ ? json::object() : json(""), nullptr);
    c["choices"] = json::array();
    c["crossword_trace"] = TraceJson(t);
    return Sse(c);
  }

  std::string Tail(Finished& f) override {
    const std::string finish = FinishReasonText(f, static_cast<int>(call_ids_.size()));
    json last = Chunk(chat_ ? json::object() : json(""), finish);
    if (c_.logprobs) last["choices"][0]["logprobs"] = LogprobsJson(chat_, f.logprobs, text_offset_);
    last["timings"] = TimingsJson(f, c_.mode);
    std::string tail = Sse(last);
    if (!c_.last) return tail;  // the stream goes on with the other choices
    if (c_.include_usage) {
      json u = Chunk(json::object(), nullptr);
      u["choices"] = json::array();
      u["usage"] = f.usage.is_null() ? UsageJson(f.outcome) : f.usage;
      tail += Sse(u);
    }
    return tail + "data: [DONE]\n\n";
  }

  std::string StreamError(const ApiError& e) override {
    return Sse(ErrorJson(e)) + "data: [DONE]\n\n";
  }

 private:
  json Envelope(const char* object) const {
    return {{"id", c_.id},
            {"object", object},
            {"created", c_.created},
            {"model", c_.model},
            {"system_fingerprint", "crossword-0.1.0"}};
  }
  json Chunk(json delta_or_text, const json& finish) const {
    json c = Envelope(chat_ ? "chat.completion.chunk" : "text_completion");
    if (chat_) {
      c["choices"] = json::array({{{"index", c_.index},
                                   {"delta", std::move(delta_or_text)},
                                   {"logprobs", nullptr},
                                   {"finish_reason", finish}}});
    } else {
      c["choices"] = json::array({{{"text", std::move(delta_or_text)},
                                   {"index", c_.index},
                                   {"logprobs", nullptr},
                                   {"finish_reason", finish}}});
    }
    if (c_.include_usage) c["usage"] = nullptr;
    return c;
  }

  WriterContext c_;
  bool chat_;
  std::vector<std::string> call_ids_;
  int64_t text_offset_ = 0;  // completions' logprobs.text_offset across chunks
};

}  // namespace

std::unique_ptr<ProtocolWriter> MakeChatWriter(WriterContext c) {
  return std::make_unique<OpenAiWriter>(std::move(c), true);
}

std::unique_ptr<ProtocolWriter> MakeCompletionWriter(WriterContext c) {
  return std::make_unique<OpenAiWriter>(std::move(c), false);
}

}  // namespace crossword::server
