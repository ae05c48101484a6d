// Logger implementation: one formatted line per call.
#include "base/log.h"

#include <iterator>
#include <string>

#include "base/error.h"

namespace crossword {

LogLevel ParseLogLevel(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warn") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  if (name == "silent") return LogLevel::kSilent;
  Fail("unknown log level '{}': use debug, info, warn, error or silent", name);
}

void Logger::WriteLine(LogLevel level, std::string_view message) const {
  static constexpr const char* kNames[] = {"debug", "info", "warn", "error", "silent"};
  std::string line = fmt::format("crossword: {}: ", kNames[static_cast<int>(level)]);
  line.reserve(line.size() + message.size() + 1);
  // One call, one line: control bytes (a request path's %0a, ANSI escapes, a model's output) are
  // written as \xNN so that no message can forge or recolour other log lines.
  for (const char c : message) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) {
      fmt::format_to(std::back_inserter(line), "\\x{:02x}", u);
    } else {
      line.push_back(c);
    }
  }
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

}  // namespace crossword
