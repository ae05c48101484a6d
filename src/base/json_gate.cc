// The JSON depth and size gate: a flat state machine over the bytes (see json_gate.h).
#include "base/json_gate.h"

#include <fmt/format.h>

namespace crossword {

std::optional<std::string> JsonLimitError(std::string_view text, const JsonLimits& limits) {
  uint32_t depth = 0;
  size_t members = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped byte cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > limits.max_depth) {
          return fmt::format("nested deeper than {} levels (arrays/objects) at byte {}",
                             limits.max_depth, i);
        }
        ++members;  // an empty container still costs a node
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      case ',':
        ++members;
        break;
      default:
        break;
    }
    if (members > limits.max_members) {
      return fmt::format("more than {} array elements and object members at byte {}",
                         limits.max_members, i);
    }
  }
  return std::nullopt;
}

std::string JsonParserMessage(std::string_view what) {
  if (what.starts_with("[json.exception.")) {
    if (const size_t end = what.find("] "); end != std::string_view::npos) {
      what.remove_prefix(end + 2);
    }
  }
  return std::string(what);
}

}  // namespace crossword
