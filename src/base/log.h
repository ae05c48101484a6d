// Leveled logging to a FILE*. A Logger is a small value passed to whoever logs (no globals).
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string_view>

namespace crossword {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kSilent = 4 };

/// Parses "debug" | "info" | "warn" | "error" | "silent". Throws crossword::Error otherwise.
LogLevel ParseLogLevel(std::string_view name);

/// Writes "crossword: <level>: message" lines to `out` (stderr by default) when the message's
/// level is at least `min_level`. Control bytes in a message (newlines, ESC, ...; tab excepted)
/// are written as \xNN: a message is always exactly one line. Cheap to copy; thread-safe per line
/// (one fwrite per message).
class Logger {
 public:
  Logger() : Logger(LogLevel::kInfo, stderr) {}
  explicit Logger(LogLevel min_level, std::FILE* out = stderr) : min_level_(min_level), out_(out) {}

  /// A logger that drops everything (tests, libraries used quietly).
  static Logger Silent() { return Logger(LogLevel::kSilent, nullptr); }

  LogLevel min_level() const { return min_level_; }
  bool Enabled(LogLevel level) const { return out_ != nullptr && level >= min_level_; }

  template <typename... Args>
  void Debug(fmt::format_string<Args...> f, Args&&... a) const {
    Write(LogLevel::kDebug, f, std::forward<Args>(a)...);
  }
  template <typename... Args>
  void Info(fmt::format_string<Args...> f, Args&&... a) const {
    Write(LogLevel::kInfo, f, std::forward<Args>(a)...);
  }
  template <typename... Args>
  void Warn(fmt::format_string<Args...> f, Args&&... a) const {
    Write(LogLevel::kWarn, f, std::forward<Args>(a)...);
  }
  template <typename... Args>
  void Err(fmt::format_string<Args...> f, Args&&... a) const {
    Write(LogLevel::kError, f, std::forward<Args>(a)...);
  }

 private:
  template <typename... Args>
  void Write(LogLevel level, fmt::format_string<Args...> f, Args&&... a) const {
    if (!Enabled(level)) return;
    WriteLine(level, fmt::format(f, std::forward<Args>(a)...));
  }
  void WriteLine(LogLevel level, std::string_view message) const;

  LogLevel min_level_;
  std::FILE* out_;
};

}  // namespace crossword
