// From generated token ids to what a client sees: UTF-8-safe decoding, stop strings (never
// partly streamed), and the chat split into reasoning / content / tool-call deltas.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/output_parser.h"
#include "tokenizer/tokenizer.h"

namespace crossword::server {

/// Holds back text that may be the beginning of a stop string. Text is released as soon as it can
/// no longer be part of a match; on a match, the text before it is released and everything from
/// the match on is dropped (OpenAI: the stop sequence is not returned).
class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops);

  /// Adds text; returns the part that is now safe to show. After a match returns "" forever.
  std::string Push(std::string_view text);
  /// End of the stream: releases what was held back (nothing after a match).
  std::string Flush();
  bool matched() const { return matched_; }
  /// The stop string that matched ("" before a match); the earliest in the text wins.
  const std::string& matched_stop() const { return matched_stop_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
  std::string matched_stop_;
};

struct OutputOptions {
  std::vector<std::string> stop;
  /// Split reasoning / content / tool calls (chat with reasoning_format deepseek). When false,
  /// all text is content (completions, reasoning_format none).
  bool parse = true;
  chat::ParseOptions parse_options;
  /// parallel_tool_calls = false: end the answer when a second tool call starts; only the first
  /// one is reported.
  bool single_tool_call = false;
  /// Text the template forced before the answer (tool_choice forcing): parsed as if generated.
  std::string forced_prefix;
};

/// One request's output pipeline. Not thread-safe (the scheduler thread feeds it).
class OutputStream {
 public:
  OutputStream(const tokenizer::Tokenizer& tokenizer, OutputOptions options);

  /// Feeds options.forced_prefix (if any) to the parser; appends its deltas to `out`. Call once,
  /// before the first token.
  void Begin(std::vector<chat::StreamDelta>& out);

  /// Text the server put into the answer itself (a forced tool call's opening): what the stop
  /// filter held back is released first, then `text` is parsed as output.
  void Inject(std::string_view text, std::vector<chat::StreamDelta>& out);
  /// Adds a generated token; appends the deltas it decides to `out`. Returns false when the
  /// generation should end here (a stop string completed, or a second tool call began while only
  /// one is allowed).
  bool OnToken(int32_t token, std::vector<chat::StreamDelta>& out);
  /// Ends the stream (flushes held-back bytes, text and unfinished tags) into `out`.
  void Finish(std::vector<chat::StreamDelta>& out);

  bool stopped_by_string() const { return stop_.matched(); }
  /// The stop string that ended the output ("" when none did).
  const std::string& stop_string() const { return stop_.matched_stop(); }
  /// Number of tool calls reported so far.
  int tool_calls() const { return n_calls_; }

 private:
  void Emit(std::string_view text, std::vector<chat::StreamDelta>& out);
  void Keep(std::vector<chat::StreamDelta>&& deltas, std::vector<chat::StreamDelta>& out);

  OutputOptions options_;
  tokenizer::StreamDecoder decoder_;
  StopFilter stop_;
  chat::StreamParser parser_;
  int n_calls_ = 0;
  bool cut_ = false;  // single_tool_call: a second call began; drop everything after
  bool finished_ = false;
};

/// OpenAI's logprobs entry of one token chosen from `logits` (raw model logits, n_vocab floats):
/// {"token", "logprob", "bytes", "top_logprobs": [`top` most likely {"token", "logprob",
/// "bytes"}]}, log-softmax computed in double. Token text is the token's bytes made valid UTF-8.
nlohmann::ordered_json TokenLogprob(const tokenizer::Tokenizer& tokenizer, int32_t token,
                                    std::span<const float> logits, int top);

/// Accumulates deltas into the final message of a non-streamed answer (the same deltas a stream
/// would send, so both agree by construction).
struct MessageBuilder {
  std::string reasoning, content;
  struct Call {
    std::string name, arguments;
  };
  std::vector<Call> calls;
  void Add(const chat::StreamDelta& d);
};

}  // namespace crossword::server
