// OpenAI Responses API (POST /v1/responses), stateless: request translation and the protocol
// writer. The handler is a Server::Impl member (responses.cc).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "server/exchange.h"

namespace crossword::server {

/// Translates a Responses body into the equivalent chat-completions body: `instructions` -> a
/// system message; `input` as a string (one user message) or items (messages with input_text /
/// output_text parts, function_call, function_call_output, reasoning); function tools; tool_choice;
/// max_output_tokens; reasoning.effort "none" (or "minimal") turns thinking off; text.format ->
/// response_format. `previous_response_id` and `conversation` are a 400 (nothing is stored).
/// Throws ApiError(400) naming the Responses field.
nlohmann::ordered_json ResponsesToChat(const nlohmann::ordered_json& body);

/// Echoed request fields the response object repeats (instructions, tools, tool_choice, ...).
struct ResponsesEcho {
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
};
/// The fields of `body` a response object repeats, with OpenAI's defaults for absent ones.
ResponsesEcho ResponsesEchoOf(const nlohmann::ordered_json& body);

/// The Responses writer: a `response` object, or the events response.created, .in_progress,
/// .output_item.added / .done, .content_part.added / .done, .output_text.delta / .done,
/// .reasoning_text.delta / .done, .function_call_arguments.delta / .done, .completed.
std::unique_ptr<ProtocolWriter> MakeResponsesWriter(WriterContext c, ResponsesEcho echo);

}  // namespace crossword::server
