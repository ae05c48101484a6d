// Logger implementation: one formatted line per call.
#include "base/log.h"

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
  std::string line = fmt::format("crossword: {}: {}\n", kNames[static_cast<int>(level)], message);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

}  // namespace crossword
