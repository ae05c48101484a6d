// Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens): request translation and
// the protocol writer. The handlers are Server::Impl members (anthropic.cc).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "server/exchange.h"

namespace crossword::server {

/// Translates a Messages body into the equivalent chat-completions body (system -> a system
/// message; text / thinking / tool_use / tool_result blocks -> content, reasoning_content,
/// tool_calls, tool messages; tools' input_schema -> parameters; tool_choice auto / any / tool /
/// none; stop_sequences -> stop; thinking enabled / disabled -> enable_thinking, off when absent).
/// count_only: max_tokens is not required (count_tokens). Throws ApiError(400) naming the
/// Messages field.
nlohmann::ordered_json MessagesToChat(const nlohmann::ordered_json& body, bool count_only);

/// The Messages writer: a `message` body, or the event stream message_start, content_block_start /
/// _delta (text_delta, thinking_delta, input_json_delta) / _stop, message_delta, message_stop.
std::unique_ptr<ProtocolWriter> MakeMessagesWriter(WriterContext c);

}  // namespace crossword::server
