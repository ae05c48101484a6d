// The protocol seam of the generation endpoints: an Exchange (one request in flight, fed by the
// scheduler thread, drained by the thread that answers) and the ProtocolWriter interface that
// turns its delta stream into one API's bytes (OpenAI chat / completions, Anthropic Messages,
// OpenAI Responses). Writers know no transport: they return JSON bodies and SSE text, and the
// exchange runner (completions.cc) does the waiting, cancelling and writing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "server/api.h"
#include "server/output.h"

namespace crossword::server {

/// One block's slots after a diffusion / spec pass (the `crossword_trace` stream extension,
/// docs/server.md): the tokens' text per slot, "" where a slot is still masked.
struct PassTrace {
  int64_t pass = 0;   ///< 1-based decoding pass of the request
  int64_t block = 0;  ///< 1-based block (diffusion) or round (spec)
  /// "denoise" (diffusion: slots filled), "commit" (diffusion: the full block written to the
  /// cache), "draft" (spec: the drafts) or "verify" (spec: how many drafts were accepted).
  std::string phase;
  std::vector<std::string> slots;  ///< the block's slots as text; "" = still masked
  std::vector<int> committed;      ///< denoise: slot indexes this pass filled
  int drafted = 0, accepted = 0;   ///< spec: drafts in the round; drafts accepted (verify)
  double tokens_per_pass = 0;      ///< of the request so far
};

/// The trace event's JSON: {pass, block, phase, slots, committed, drafted, accepted,
/// tokens_per_pass}.
nlohmann::ordered_json TraceJson(const PassTrace& t);

/// The sampled tokens whose text a delta carries first (their ids and, when asked for, their
/// logprob entries): a token whose text is held back (a partial stop string, an incomplete UTF-8
/// sequence, markup being parsed) rides on the first delta that shows it.
struct DeltaTokens {
  std::vector<int32_t> ids;
  std::vector<nlohmann::ordered_json> logprobs;
};

/// One generation request in flight: filled by the scheduler thread (callbacks), drained by the
/// thread that answers the client.
struct Exchange {
  explicit Exchange(const tokenizer::Tokenizer& tok, OutputOptions o) : stream(tok, std::move(o)) {}
  std::mutex mu;
  std::condition_variable cv;
  std::vector<chat::StreamDelta> deltas;  // decided, not yet taken by the answering thread
  std::vector<DeltaTokens> delta_tokens;  // the tokens each of `deltas` carries (same length)
  bool done = false;
  engine::RequestOutcome outcome;
  bool stopped = false;        // a stop string or the single-tool-call rule ended it
  std::string stop_string;     // the stop string that ended it ("" if none)
  double first_token_at = -1;  // seconds since submit
  std::vector<nlohmann::ordered_json> logprobs;   // entries of tokens no delta carries (the end)
  std::shared_ptr<engine::RequestHandle> handle;  // the running part (a forced call adds one)
  bool cancelled = false;
  /// Cancels the request (any thread): the running part and any continuation.
  void Cancel() {
    std::lock_guard lk(mu);
    cancelled = true;
    if (handle) handle->Cancel();
  }
  /// Appends `from` (emptied) to `deltas`, the first of them carrying `held` (then emptied); with
  /// no delta, `held` waits for the next call. Call under `mu`.
  void PushDeltas(std::vector<chat::StreamDelta>& from, DeltaTokens& held) {
    for (size_t i = 0; i < from.size(); ++i) {
      deltas.push_back(std::move(from[i]));
      delta_tokens.emplace_back();
      if (i == 0) std::swap(delta_tokens.back(), held);
    }
    from.clear();
  }
  // Scheduler thread only.
  OutputStream stream;
  std::vector<chat::StreamDelta> scratch;
  DeltaTokens held;  // tokens whose text no delta has shown yet
  std::chrono::steady_clock::time_point submitted;
  // tool_choice required / named with thinking on: when the reasoning ends (`</think>`), the
  // generation stops and continues from prompt + answer + the call's opening.
  struct Force {
    bool armed = false, triggered = false;
    int32_t think_end = -1;
    std::string text;             // "\n\n<tool_call>\n<function=NAME>\n"
    std::vector<int32_t> tokens;  // its tokens
    // The tool-call grammar of the continuation (the reasoning before it is free text).
    std::shared_ptr<const grammar::CompiledGrammar> grammar;
  } force;
  std::vector<int32_t> prompt;  // prompt of the running part
  decode::DecodeParams params;  // its parameters
  bool use_cache = true;
  bool streaming = false;          // the answering thread waits for deltas (else only for `done`)
  bool trace = false;              // collect PassTraces (stream_options.crossword_trace)
  std::vector<PassTrace> traces;   // decided, not yet taken (under mu)
  PassTrace last_trace;            // scheduler thread: the previous pass's view
  decode::DecodeStats last_stats;  // scheduler thread: counters after the previous pass
  int top_logprobs = -1;
  engine::RequestOutcome first;  // outcome of the part before a continuation
  bool continued = false;
};

/// Seconds spent queued, on the prompt and generating, from an outcome and the first token's time.
struct Timings {
  double queue_s = 0, prompt_s = 0, gen_s = 0;
};
Timings TimingsOf(const engine::RequestOutcome& o, double first_token_at);

/// What every writer is told when an exchange starts.
struct WriterContext {
  std::string id;              ///< the response id (protocol prefix + random)
  int64_t created = 0;         ///< unix seconds
  std::string model;           ///< the model's name in responses
  decode::Mode mode{};         ///< the request's decoding mode
  float temperature = 0;       ///< the sampling temperature in effect (request or server default)
  float top_p = 1;             ///< the top-p in effect
  int64_t prompt_tokens = 0;   ///< tokens of the prompt (known before the first token)
  bool include_usage = false;  ///< OpenAI stream_options.include_usage
  bool logprobs = false;       ///< per-token logprobs asked for
  int index = 0;               ///< the choice this writer answers (n > 1, several prompts)
  bool last = true;            ///< the last choice: its stream tail ends the stream
  int32_t think_end = -1;      ///< the `</think>` token id (-1: the tokenizer has none)
  std::function<std::string(const char*)> new_id;  ///< fresh ids (tool calls, items)
};

/// What a finished exchange gives its writer (read under the exchange's lock).
struct Finished {
  const engine::RequestOutcome& outcome;  ///< tokens, finish reason, counters, timings
  double first_token_at = -1;             ///< seconds from submit to the first token (-1: none)
  std::string stop_string;                ///< the stop string that ended the answer ("": none)
  std::vector<nlohmann::ordered_json> logprobs;  ///< token entries not yet written
  nlohmann::ordered_json usage;                  ///< usage over every choice; null: from `outcome`
};

/// One API's answer format. A writer is used by one thread; for a stream the runner calls Head,
/// then Deltas for each batch as it arrives (and Trace per pass when asked for), then Tail or
/// StreamError; for a non-streamed answer only Final.
class ProtocolWriter {
 public:
  virtual ~ProtocolWriter() = default;
  /// The whole non-streamed body from every delta of the answer.
  virtual nlohmann::ordered_json Final(std::span<const chat::StreamDelta> deltas, Finished& f) = 0;
  /// The stream's opening events ("" when the protocol has none).
  virtual std::string Head() = 0;
  /// Events for a batch of deltas; `logprobs` are the token entries that came with them (the
  /// writer takes what it writes). The runner passes one delta at a time, with its own entries.
  virtual std::string Deltas(std::span<const chat::StreamDelta> deltas,
                             std::vector<nlohmann::ordered_json>& logprobs) = 0;
  /// The token ids the next Deltas call's deltas carry (llama-server's `tokens` of a chunk);
  /// ignored by protocols without them.
  virtual void NoteTokens(std::span<const int32_t> /*ids*/) {}
  /// One pass's trace event (opt-in extension); "" when the protocol does not carry it.
  virtual std::string Trace(const PassTrace& /*t*/) { return ""; }
  /// The stream's closing events after a successful end.
  virtual std::string Tail(Finished& f) = 0;
  /// The stream's closing events after a failure (the HTTP status is already 200).
  virtual std::string StreamError(const ApiError& e) = 0;
};

/// OpenAI's usage object {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details}.
nlohmann::ordered_json UsageJson(const engine::RequestOutcome& o);
/// llama-server's "timings" object plus crossword's decoding counters (mode, passes, ...).
nlohmann::ordered_json TimingsJson(const Finished& f, decode::Mode mode);
/// JSON serialization that never throws on odd bytes (replaced by U+FFFD).
std::string Dump(const nlohmann::ordered_json& j);
/// `data: JSON\n\n`.
std::string Sse(const nlohmann::ordered_json& j);
/// `event: NAME\ndata: JSON\n\n` (Anthropic and Responses streams name their events).
std::string NamedSse(const std::string& event, const nlohmann::ordered_json& j);

/// OpenAI /v1/chat/completions: chat.completion and chat.completion.chunk.
std::unique_ptr<ProtocolWriter> MakeChatWriter(WriterContext c);
/// OpenAI /v1/completions: text_completion (streamed and not).
std::unique_ptr<ProtocolWriter> MakeCompletionWriter(WriterContext c);

}  // namespace crossword::server
