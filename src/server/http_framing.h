// HTTP/1.1 request framing for the server's transport (http.cc): how Boost.Beast's request parser
// is set up, which limits apply when, and what a parsed header becomes (http_framing.cc also
// defines Request's accessors). Transport-free (no Asio), so the HTTP fuzzer (fuzz/http_fuzzer.cc)
// drives the same code with bytes. Internal to the server.
#pragma once

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <string>
#include <string_view>

#include "server/http.h"

namespace crossword::server::http {

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

/// Readies a fresh parser for the next request: the header limit (larger: header_limit, 431) and
/// no body limit yet (CheckHeader sets it once the length is known).
void StartRequest(RequestParser& parser, const Limits& limits);

/// What to do once the header is complete.
struct HeaderVerdict {
  int status = 0;              ///< 0: read the body; else answer this (413, 417) and close
  bool send_continue = false;  ///< answer "100 Continue" before reading the body
};
/// Checks a complete header against `limits`: a Content-Length over max_body is refused at once
/// (417 when the client waits for 100 Continue, else 413); otherwise sets the body limit to
/// max_body, which then applies to every encoding (chunked bodies included).
HeaderVerdict CheckHeader(RequestParser& parser, const Limits& limits);

/// The status answered for a parser error (the stream's own errors, e.g. timeouts or resets,
/// are the transport's): 431 header too large, 413 body too large, 0 for end_of_stream (closed
/// between requests: no answer), 400 for anything else (malformed request line, header or chunk
/// framing, bad or negative Content-Length, a header cut short: partial_message). A body cut
/// short (partial_message after the header) is closed without an answer by the caller.
int ParserErrorStatus(const boost::beast::error_code& ec);

/// Fills the header fields of `r` from the parser's (possibly partial) message: method, target,
/// path (percent-decoded, before '?'), query, version, headers in order. Leaves body and the
/// connection fields alone.
void FillRequestHeader(const RequestParser& parser, Request& r);

/// Whether the connection may carry another request after this one (HTTP/1.1 keep-alive; an
/// HTTP/1.0 client gets one request).
bool KeepsAlive(const RequestParser& parser);

/// ASCII case-insensitive equality (header names, "100-continue").
bool SameFieldName(std::string_view a, std::string_view b);

/// %XX decoded (a bad or truncated escape stays as it is).
std::string PercentDecode(std::string_view in);

}  // namespace crossword::server::http
