// A depth and size gate for untrusted JSON text (HTTP bodies, tool-call arguments, model output):
// one iterative byte scan, run before the text is parsed, so that nothing recursive (a DOM copy,
// dump(), comparison, a template walk) ever sees a document nested deeper than the limit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace crossword {

/// Limits on untrusted JSON documents.
struct JsonLimits {
  /// Arrays and objects nested inside each other (a scalar at top level is depth 0, `[]` is 1).
  /// Every JSON value a request can carry in practice (schemas, tool arguments, kwargs) stays far
  /// below; recursive walks over request data are safe at this depth on an 8 MiB thread stack.
  uint32_t max_depth = 256;
  /// Array elements plus object members over the whole document (bounds DOM size per byte).
  size_t max_members = 1'000'000;
};

/// Scans JSON text without recursion and reports the first limit exceeded: nullopt when within
/// `limits`, else a sentence naming the limit, the value found and the byte offset, e.g.
/// "nested deeper than 256 levels (arrays/objects) at byte 1024". Malformed JSON is not diagnosed
/// here (the parser does that after); strings are skipped, with backslash escapes honoured, so
/// brackets inside strings do not count. O(n) time, O(1) memory.
std::optional<std::string> JsonLimitError(std::string_view text, const JsonLimits& limits = {});

/// A JSON parser's error message for a client: nlohmann's exception tag
/// ("[json.exception.parse_error.101] ") removed, the rest (where the text broke and why) kept.
std::string JsonParserMessage(std::string_view what);

}  // namespace crossword
