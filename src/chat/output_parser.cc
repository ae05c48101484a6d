// Reasoning / content / XML tool-call parsing as a resumable state machine over a small buffer of
// undecided text. Only text that can no longer become part of a tag is emitted, so streaming and
// one-shot parsing give the same result for every way of cutting the input into chunks.
#include "chat/output_parser.h"

#include <algorithm>

#include "base/error.h"
#include "base/json_gate.h"
#include "chat/tool_args_internal.h"

namespace crossword::chat {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=";
constexpr std::string_view kParamClose = "</parameter>";
// A function or parameter name longer than this, or spanning lines, is not a tag.
constexpr size_t kMaxNameLength = 256;

bool IsWs(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

size_t SkipWs(std::string_view s, size_t i = 0) {
  while (i < s.size() && IsWs(s[i])) ++i;
  return i;
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// `s` is a non-empty proper prefix of `tag`, or empty.
bool IsPrefixOf(std::string_view s, std::string_view tag) {
  return s.size() < tag.size() && tag.substr(0, s.size()) == s;
}

// Longest suffix of `s` that is a proper prefix of one of `tags` (text that may still become a
// tag once more input arrives).
size_t PartialTagSuffix(std::string_view s, std::initializer_list<std::string_view> tags) {
  size_t best = 0;
  for (std::string_view tag : tags) {
    for (size_t k = std::min(s.size(), tag.size() - 1); k > best; --k) {
      if (s.substr(s.size() - k) == tag.substr(0, k)) {
        best = k;
        break;
      }
    }
  }
  return best;
}

std::string Trim(std::string_view s) {
  size_t b = SkipWs(s), e = s.size();
  while (e > b && IsWs(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

}  // namespace

bool PromptOpensThinking(std::string_view prompt) {
  size_t open = prompt.rfind(kThinkOpen);
  if (open == std::string_view::npos) return false;
  return prompt.find(kThinkClose, open) == std::string_view::npos;
}

struct StreamParser::Impl {
  enum class Mode {
    kStart,
    kReasoning,
    kContent,
    kCallOpen,
    kJsonCall,
    kCallBody,
    kParamValue,
    kAfterFunction
  };
  // Whitespace trimming of a text section: leading whitespace is dropped, trailing whitespace
  // is held until non-space text follows (and dropped if none does).
  struct Section {
    bool started = false;
    std::string pending_ws;
  };

  ParseOptions opt;
  ParsedOutput result;
  Mode mode = Mode::kStart;
  std::string buf;
  bool finishing = false;
  bool finished = false;
  bool think_tag_allowed = true;  // a leading <think> may still be skipped
  Section reasoning, content;
  std::vector<StreamDelta> out;
  // Current tool call / parameter.
  int params = 0;
  std::string param_name;
  const Json* param_schema = nullptr;
  bool param_is_string = true;
  bool value_started = false;
  std::string param_raw;

  void Push(StreamDelta::Kind kind, std::string text, int index = -1, std::string name = "") {
    if (text.empty() && kind != StreamDelta::Kind::kToolCallStart) return;
    if (!out.empty() && out.back().kind == kind && kind != StreamDelta::Kind::kToolCallStart &&
        out.back().index == index) {
      out.back().text += text;
      return;
    }
    out.push_back(StreamDelta{kind, std::move(text), index, std::move(name)});
  }

  void EmitText(Section& sec, StreamDelta::Kind kind, std::string_view text) {
    if (!sec.started) {
      text = text.substr(SkipWs(text));
      if (text.empty()) return;
      sec.started = true;
    }
    size_t end = text.size();
    while (end > 0 && IsWs(text[end - 1])) --end;
    if (end == 0) {
      sec.pending_ws.append(text);
      return;
    }
    std::string piece = std::move(sec.pending_ws);
    piece.append(text.substr(0, end));
    sec.pending_ws = std::string(text.substr(end));
    (kind == StreamDelta::Kind::kReasoning ? result.reasoning : result.content) += piece;
    Push(kind, std::move(piece));
  }

  void EmitArgs(const std::string& text) {
    Push(StreamDelta::Kind::kToolCallArguments, text,
         static_cast<int>(result.tool_calls.size()) - 1);
  }

  void StartCall(std::string name) {
    result.tool_calls.push_back(ToolCall{name, Json::object()});
    Push(StreamDelta::Kind::kToolCallStart, "", static_cast<int>(result.tool_calls.size()) - 1,
         std::move(name));
    params = 0;
  }

  void EndCall() { EmitArgs(params == 0 ? "{}" : "}"); }

  // Emits part of a string parameter's value (already known not to hold any tag).
  void EmitValue(std::string_view raw) {
    if (raw.empty()) return;
    if (param_is_string) {
      param_raw.append(raw);
      EmitArgs(JsonEscape(SanitizeUtf8(raw)));
    } else {
      param_raw.append(raw);
    }
  }

  void EndParam() {
    Json value = param_is_string ? Json(SanitizeUtf8(param_raw))
                                 : TypeParameterValue(param_raw, param_schema);
    EmitArgs(param_is_string ? "\"" : value.dump(-1, ' ', false, Json::error_handler_t::replace));
    result.tool_calls.back().arguments[SanitizeUtf8(param_name)] = std::move(value);
    ++params;
  }

  // Text sections (reasoning / content): emit up to the next tag, hold possible partial tags.
  bool StepText(bool in_reasoning) {
    std::vector<std::string_view> tags;
    if (in_reasoning) tags.push_back(kThinkClose);
    if (opt.parse_tool_calls) tags.push_back(kCallOpen);
    size_t best = std::string::npos;
    std::string_view found;
    for (std::string_view tag : tags) {
      size_t p = buf.find(tag);
      if (p < best) {
        best = p;
        found = tag;
      }
    }
    Section& sec = in_reasoning ? reasoning : content;
    auto kind = in_reasoning ? StreamDelta::Kind::kReasoning : StreamDelta::Kind::kContent;
    if (best != std::string::npos) {
      EmitText(sec, kind, std::string_view(buf).substr(0, best));
      buf.erase(0, best + found.size());
      if (in_reasoning) reasoning.pending_ws.clear();
      mode = found == kThinkClose ? Mode::kContent : Mode::kCallOpen;
      return true;
    }
    size_t hold = 0;
    if (!finishing) {
      for (std::string_view tag : tags) hold = std::max(hold, PartialTagSuffix(buf, {tag}));
      hold += IncompleteUtf8Tail(std::string_view(buf).substr(0, buf.size() - hold));
    }
    EmitText(sec, kind, std::string_view(buf).substr(0, buf.size() - hold));
    buf.erase(0, buf.size() - hold);
    return false;
  }

  // Reads `<tag=NAME>` at the start of `rest`: 1 = parsed, 0 = need more input, -1 = not a tag.
  int ReadNamedTag(std::string_view rest, std::string_view tag, std::string* name,
                   size_t* consumed) {
    if (rest.size() < tag.size()) return IsPrefixOf(rest, tag) || rest.empty() ? 0 : -1;
    if (!StartsWith(rest, tag)) return -1;
    size_t close = rest.find('>', tag.size());
    size_t bad = rest.find_first_of("\n<", tag.size());
    if (close == std::string_view::npos) {
      if (bad != std::string_view::npos || rest.size() - tag.size() > kMaxNameLength) return -1;
      return 0;
    }
    if (bad < close || close - tag.size() > kMaxNameLength) return -1;
    *name = Trim(rest.substr(tag.size(), close - tag.size()));
    *consumed = close + 1;
    return name->empty() ? -1 : 1;
  }

  // After <tool_call>: `<function=NAME>` starts an XML call, `{` a JSON call (Hermes / Qwen3
  // style); anything else was not a tool call and goes back to the content.
  bool StepCallOpen() {
    size_t ws = SkipWs(buf);
    std::string_view rest = std::string_view(buf).substr(ws);
    if (!rest.empty() && rest[0] == '{') {
      mode = Mode::kJsonCall;
      return true;
    }
    std::string name;
    size_t consumed = 0;
    int r = ReadNamedTag(rest, kFunctionOpen, &name, &consumed);
    if (r == 0 && !finishing) return false;
    if (r == 1) {
      buf.erase(0, ws + consumed);
      StartCall(std::move(name));
      mode = Mode::kCallBody;
      return true;
    }
    EmitText(content, StreamDelta::Kind::kContent, kCallOpen);  // not a call after all
    mode = Mode::kContent;
    return true;
  }

  bool StepJsonCall() {
    size_t close = buf.find(kCallClose);
    if (close == std::string::npos && !finishing) return false;
    std::string body = buf.substr(0, close == std::string::npos ? buf.size() : close);
    // Model output is untrusted too: a deep bracket run would overflow a later dump().
    const std::string text = Trim(body);
    Json call =
        JsonLimitError(text) ? Json(Json::value_t::discarded) : Json::parse(text, nullptr, false);
    if (call.is_object() && call.contains("name") && call["name"].is_string()) {
      StartCall(call["name"].get<std::string>());
      Json args = call.contains("arguments") ? call["arguments"] : Json::object();
      if (args.is_string() && !JsonLimitError(args.get_ref<const std::string&>())) {
        args = Json::parse(args.get<std::string>(), nullptr, false);
      }
      if (!args.is_object()) args = Json::object();
      result.tool_calls.back().arguments = args;
      EmitArgs(result.tool_calls.back().ArgumentsJson());
    } else {
      EmitText(content, StreamDelta::Kind::kContent, kCallOpen);
      EmitText(content, StreamDelta::Kind::kContent, body);
      if (close != std::string::npos) EmitText(content, StreamDelta::Kind::kContent, kCallClose);
    }
    buf.erase(0, close == std::string::npos ? buf.size() : close + kCallClose.size());
    mode = Mode::kContent;
    return true;
  }

  bool StepCallBody() {
    size_t ws = SkipWs(buf);
    std::string_view rest = std::string_view(buf).substr(ws);
    if (rest.empty()) {
      buf.erase(0, ws);
      return false;
    }
    std::string name;
    size_t consumed = 0;
    int r = ReadNamedTag(rest, kParamOpen, &name, &consumed);
    if (r == 1) {
      buf.erase(0, ws + consumed);
      param_name = name;
      param_schema = FindParameterSchema(opt.tools, result.tool_calls.back().name, name);
      param_is_string = IsStringType(param_schema);
      param_raw.clear();
      value_started = false;
      EmitArgs((params == 0 ? "{\"" : ",\"") + JsonEscape(SanitizeUtf8(name)) +
               "\":" + (param_is_string ? "\"" : ""));
      mode = Mode::kParamValue;
      return true;
    }
    for (std::string_view end : {kFunctionClose, kCallClose}) {
      if (StartsWith(rest, end)) {
        buf.erase(0, ws + end.size());
        EndCall();
        mode = end == kFunctionClose ? Mode::kAfterFunction : Mode::kContent;
        return true;
      }
    }
    if (r == 0 || IsPrefixOf(rest, kFunctionClose) || IsPrefixOf(rest, kCallClose)) {
      if (!finishing) return false;
    }
    // Stray text between parameters: skip to the next tag.
    size_t next = rest.find('<', 1);
    buf.erase(0, next == std::string_view::npos ? buf.size() : ws + next);
    return true;
  }

  // A </parameter> at `p` ends the value only when followed by whitespace and the next
  // parameter, </function> or </tool_call> (or the end of the output, possibly cut inside one of
  // those tags): 1 yes, 0 undecided, -1 no.
  int IsStructuralClose(size_t p) const {
    size_t q = SkipWs(buf, p + kParamClose.size());
    std::string_view rest = std::string_view(buf).substr(q);
    if (rest.empty()) return finishing ? 1 : 0;
    for (std::string_view next : {kParamOpen, kFunctionClose, kCallClose}) {
      if (StartsWith(rest, next)) return 1;
      if (IsPrefixOf(rest, next)) return finishing ? 1 : 0;  // cut inside the next tag
    }
    return -1;
  }

  bool StepParamValue() {
    if (!value_started) {
      if (buf.empty() && !finishing) return false;
      if (!buf.empty() && buf[0] == '\n') buf.erase(0, 1);  // one leading newline is markup
      value_started = true;
    }
    for (size_t p = buf.find(kParamClose); p != std::string::npos;
         p = buf.find(kParamClose, p + 1)) {
      int s = IsStructuralClose(p);
      if (s < 0) continue;
      if (s == 0) {
        // Undecided: emit what precedes, keeping a trailing newline and split characters back.
        size_t keep = p;
        if (keep > 0 && buf[keep - 1] == '\n') --keep;
        keep -= IncompleteUtf8Tail(std::string_view(buf).substr(0, keep));
        EmitValue(std::string_view(buf).substr(0, keep));
        buf.erase(0, keep);
        return false;
      }
      size_t end = p > 0 && buf[p - 1] == '\n' ? p - 1 : p;  // and one trailing newline
      EmitValue(std::string_view(buf).substr(0, end));
      buf.erase(0, p + kParamClose.size());
      EndParam();
      mode = Mode::kCallBody;
      return true;
    }
    if (finishing) {  // cut inside the value: keep what arrived
      size_t end = !buf.empty() && buf.back() == '\n' ? buf.size() - 1 : buf.size();
      EmitValue(std::string_view(buf).substr(0, end));
      buf.clear();
      EndParam();
      mode = Mode::kCallBody;
      return true;
    }
    size_t hold = PartialTagSuffix(buf, {kParamClose});
    if (hold < buf.size() && buf[buf.size() - hold - 1] == '\n') ++hold;
    hold += IncompleteUtf8Tail(std::string_view(buf).substr(0, buf.size() - hold));
    EmitValue(std::string_view(buf).substr(0, buf.size() - hold));
    buf.erase(0, buf.size() - hold);
    return false;
  }

  bool StepAfterFunction() {
    size_t ws = SkipWs(buf);
    std::string_view rest = std::string_view(buf).substr(ws);
    if (StartsWith(rest, kCallClose)) {
      buf.erase(0, ws + kCallClose.size());
    } else if ((rest.empty() || IsPrefixOf(rest, kCallClose)) && !finishing) {
      return false;
    }
    mode = Mode::kContent;  // a missing </tool_call> is tolerated
    return true;
  }

  bool StepStart() {
    size_t ws = SkipWs(buf);
    std::string_view rest = std::string_view(buf).substr(ws);
    if (StartsWith(rest, kThinkOpen)) {
      buf.erase(0, ws + kThinkOpen.size());
      mode = Mode::kReasoning;
      return true;
    }
    if (IsPrefixOf(rest, kThinkOpen) && !finishing) return false;
    mode = opt.thinking_opened ? Mode::kReasoning : Mode::kContent;
    return true;
  }

  void Run() {
    while (true) {
      bool progress = false;
      switch (mode) {
        case Mode::kStart:
          progress = StepStart();
          break;
        case Mode::kReasoning:
          progress = StepText(true);
          break;
        case Mode::kContent:
          progress = StepText(false);
          break;
        case Mode::kCallOpen:
          progress = StepCallOpen();
          break;
        case Mode::kJsonCall:
          progress = StepJsonCall();
          break;
        case Mode::kCallBody:
          progress = StepCallBody();
          break;
        case Mode::kParamValue:
          progress = StepParamValue();
          break;
        case Mode::kAfterFunction:
          progress = StepAfterFunction();
          break;
      }
      if (!progress) return;
    }
  }

  std::vector<StreamDelta> TakeOut() {
    std::vector<StreamDelta> deltas = std::move(out);
    out.clear();
    return deltas;
  }
};

StreamParser::StreamParser(ParseOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(options);
}
StreamParser::~StreamParser() = default;
StreamParser::StreamParser(StreamParser&&) noexcept = default;
StreamParser& StreamParser::operator=(StreamParser&&) noexcept = default;

std::vector<StreamDelta> StreamParser::Feed(std::string_view chunk) {
  Check(!impl_->finished, "StreamParser::Feed called after Finish; create a new parser per output");
  impl_->buf.append(chunk);
  impl_->Run();
  return impl_->TakeOut();
}

std::vector<StreamDelta> StreamParser::Finish() {
  Impl& s = *impl_;
  Check(!s.finished, "StreamParser::Finish called twice");
  s.finishing = true;
  s.Run();
  if (s.mode == Impl::Mode::kCallBody) {  // cut between parameters: close the call
    s.EndCall();
  }
  s.finished = true;
  return s.TakeOut();
}

const ParsedOutput& StreamParser::result() const { return impl_->result; }

ParsedOutput ParseOutput(std::string_view text, const ParseOptions& options) {
  StreamParser parser(options);
  parser.Feed(text);
  parser.Finish();
  return parser.result();
}

}  // namespace crossword::chat
