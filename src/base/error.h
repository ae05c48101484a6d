// Error type used across crossword: one exception class carrying a user-facing message.
// Messages name the offending field/tensor, expected vs actual, and what to do.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace crossword {

/// The single error type thrown by crossword libraries. `what()` is a complete, user-facing
/// sentence (no stack trace needed): it names the input (file, tensor, field, byte offset) and,
/// where possible, what the user can do about it.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// An Error the request itself caused, found while serving it (its logit_bias and grammar leave no
/// token at some position, ...): servers answer it as a client error (HTTP 400), not a 500.
class RequestError : public Error {
 public:
  explicit RequestError(const std::string& message) : Error(message) {}
};

/// Throws crossword::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void Fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

/// Throws crossword::Error when `condition` is false.
template <typename... Args>
void Check(bool condition, fmt::format_string<Args...> format, Args&&... args) {
  if (!condition) throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace crossword
