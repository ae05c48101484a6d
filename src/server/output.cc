// Output pipeline: StreamDecoder -> StopFilter -> chat::StreamParser, and the non-stream builder.
#include "server/output.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tokenizer/utf8.h"

namespace crossword::server {

StopFilter::StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopFilter::Push(std::string_view text) {
  if (matched_) return {};
  held_.append(text);
  if (stops_.empty()) return std::exchange(held_, {});
  size_t first = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at < first) {
      first = at;
      matched_stop_ = s;
    }
  }
  if (first != std::string::npos) {
    matched_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Keep the longest tail that is a proper prefix of some stop string: it may still complete.
  size_t keep = 0;
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopFilter::Flush() {
  if (matched_) return {};
  return std::exchange(held_, {});
}

OutputStream::OutputStream(const tokenizer::Tokenizer& tokenizer, OutputOptions options)
    : options_(std::move(options)),
      decoder_(tokenizer, /*render_special=*/true),
      stop_(options_.stop),
      parser_(options_.parse_options) {}

void OutputStream::Begin(std::vector<chat::StreamDelta>& out) {
  if (!options_.forced_prefix.empty()) Emit(options_.forced_prefix, out);
}

void OutputStream::Keep(std::vector<chat::StreamDelta>&& deltas,
                        std::vector<chat::StreamDelta>& out) {
  for (auto& d : deltas) {
    if (options_.single_tool_call && d.kind == chat::StreamDelta::Kind::kToolCallStart &&
        d.index >= 1)
      cut_ = true;
    // After the cut only the first call's remaining argument text is kept.
    if (cut_ && !(d.kind == chat::StreamDelta::Kind::kToolCallArguments && d.index == 0)) continue;
    if (d.kind == chat::StreamDelta::Kind::kToolCallStart)
      n_calls_ = std::max(n_calls_, d.index + 1);
    out.push_back(std::move(d));
  }
}

void OutputStream::Emit(std::string_view text, std::vector<chat::StreamDelta>& out) {
  if (text.empty()) return;
  if (!options_.parse) {
    out.push_back({chat::StreamDelta::Kind::kContent, std::string(text), -1, {}});
    return;
  }
  Keep(parser_.Feed(text), out);
}

void OutputStream::Inject(std::string_view text, std::vector<chat::StreamDelta>& out) {
  if (finished_ || cut_ || stop_.matched()) return;
  Emit(stop_.Flush(), out);
  stop_ = StopFilter(options_.stop);
  Emit(text, out);
}

bool OutputStream::OnToken(int32_t token, std::vector<chat::StreamDelta>& out) {
  if (finished_ || cut_ || stop_.matched()) return false;
  Emit(stop_.Push(decoder_.Feed(token)), out);
  return !stop_.matched() && !cut_;
}

void OutputStream::Finish(std::vector<chat::StreamDelta>& out) {
  if (finished_) return;
  finished_ = true;
  Emit(stop_.Push(decoder_.Flush()), out);
  Emit(stop_.Flush(), out);
  if (options_.parse) Keep(parser_.Finish(), out);
}

nlohmann::ordered_json TokenLogprob(const tokenizer::Tokenizer& tokenizer, int32_t token,
                                    std::span<const float> logits, int top) {
  using json = nlohmann::ordered_json;
  double mx = -std::numeric_limits<double>::infinity();
  for (float x : logits) mx = std::max(mx, static_cast<double>(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
  const double lse = mx + std::log(sum);
  auto entry = [&](int32_t id) {
    const std::string_view bytes = tokenizer.TokenBytes(id);
    std::string text;
    tokenizer::AppendUtf8Lossy(bytes, text);
    json b = json::array();
    for (unsigned char c : bytes) b.push_back(c);
    const double lp =
        id >= 0 && static_cast<size_t>(id) < logits.size() ? logits[id] - lse : -INFINITY;
    return json{{"id", id}, {"token", text}, {"logprob", lp}, {"bytes", b}};
  };
  json e = entry(token);
  json alts = json::array();
  if (top > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    const size_t k = std::min(ids.size(), static_cast<size_t>(top));
    std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(k), ids.end(),
                      [&](int32_t a, int32_t b) {
                        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                      });
    for (size_t i = 0; i < k; ++i) alts.push_back(entry(ids[i]));
  }
  e["top_logprobs"] = alts;
  return e;
}

void MessageBuilder::Add(const chat::StreamDelta& d) {
  using Kind = chat::StreamDelta::Kind;
  switch (d.kind) {
    case Kind::kReasoning:
      reasoning += d.text;
      break;
    case Kind::kContent:
      content += d.text;
      break;
    case Kind::kToolCallStart:
      if (d.index >= 0) {
        if (calls.size() <= static_cast<size_t>(d.index))
          calls.resize(static_cast<size_t>(d.index) + 1);
        calls[static_cast<size_t>(d.index)].name = d.name;
      }
      break;
    case Kind::kToolCallArguments:
      if (d.index >= 0) {
        if (calls.size() <= static_cast<size_t>(d.index))
          calls.resize(static_cast<size_t>(d.index) + 1);
        calls[static_cast<size_t>(d.index)].arguments += d.text;
      }
      break;
  }
}

}  // namespace crossword::server
