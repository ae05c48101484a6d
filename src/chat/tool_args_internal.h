// Helpers shared by the tool-call argument typing and the streaming output parser (internal).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace crossword::chat {

/// Replaces each byte that is not part of a valid UTF-8 sequence with U+FFFD.
std::string SanitizeUtf8(std::string_view s);
/// Length of a trailing, still incomplete UTF-8 sequence (0..3 bytes) that more input may
/// complete; such bytes are held back so that no delta splits a character.
size_t IncompleteUtf8Tail(std::string_view s);
/// JSON string-body escaping identical to nlohmann::json::dump() for valid UTF-8.
std::string JsonEscape(std::string_view s);
/// Whether a parameter with this schema (null: not declared) keeps its raw text.
bool IsStringType(const nlohmann::ordered_json* schema);
/// The JSON schema of `parameter` of `function` in an OpenAI tools array, or null.
const nlohmann::ordered_json* FindParameterSchema(const nlohmann::ordered_json& tools,
                                                  const std::string& function,
                                                  const std::string& parameter);

}  // namespace crossword::chat
