// libFuzzer target for the server's HTTP framing: raw bytes from a client -> Boost.Beast's request
// parser set up and checked exactly as the transport does (server/http_framing.h: header limit,
// Content-Length and Expect checks, the body limit on every encoding, keep-alive and pipelining)
// -> each complete request's body to its route's request path (request_path.h: gate, validation,
// template, output parser; model stubbed). Limits are scaled down (4 KiB header, 16 KiB body) so
// that inputs of fuzzing size reach them.
//
// Input: the first byte is the size of each read (TCP segments; 0: everything at once), the rest
// the bytes the client sends, then closes. Besides crashes and sanitizer reports, a broken
// framing invariant traps: a body over the limit handed on, an oversized Content-Length not
// refused, a 100 Continue without an Expect, a request taken after one that closes.
#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "request_path.h"
#include "server/http_framing.h"

namespace {

namespace bhttp = boost::beast::http;
namespace http = crossword::server::http;
using crossword::fuzz::Api;

void Require(bool ok) {
  if (!ok) __builtin_trap();
}

// The client's bytes as the socket delivers them: `step` at a time (all when 0).
class Wire {
 public:
  Wire(std::string_view bytes, size_t step) : bytes_(bytes), step_(step ? step : bytes.size()) {}
  // Appends the next read to `buffer`; false at the end (the client closed).
  bool Receive(std::string& buffer) {
    if (bytes_.empty()) return false;
    const size_t n = std::min(step_, bytes_.size());
    buffer.append(bytes_.substr(0, n));
    bytes_.remove_prefix(n);
    return true;
  }

 private:
  std::string_view bytes_;
  size_t step_;
};

// Feeds `buffer` (then further reads) to the parser until `done` holds: Beast's read algorithm
// (put what is buffered, read more on need_more, put_eof at the end). Returns the error, if any.
template <typename Done>
boost::beast::error_code Feed(http::RequestParser& parser, std::string& buffer, Wire& wire,
                              Done done) {
  boost::beast::error_code ec;
  while (!done()) {
    if (buffer.empty() && !wire.Receive(buffer)) {
      if (!parser.got_some()) return bhttp::error::end_of_stream;
      parser.put_eof(ec);
      return ec ? ec : boost::beast::error_code(bhttp::error::partial_message);
    }
    const size_t n = parser.put(boost::asio::const_buffer(buffer.data(), buffer.size()), ec);
    buffer.erase(0, n);
    if (ec == bhttp::error::need_more) {
      ec = {};
      if (!wire.Receive(buffer)) {
        if (!parser.got_some()) return bhttp::error::end_of_stream;
        parser.put_eof(ec);
        return ec ? ec : boost::beast::error_code(bhttp::error::partial_message);
      }
      continue;
    }
    if (ec) return ec;
  }
  return {};
}

// The route a request goes to (the server's POST routes that take a JSON body), or false.
bool RouteOf(const http::Request& r, Api& api) {
  if (r.method != "POST") return false;
  if (r.path == "/v1/chat/completions" || r.path == "/chat/completions" ||
      r.path == "/apply-template") {
    api = Api::kChat;
  } else if (r.path == "/v1/completions" || r.path == "/completions") {
    api = Api::kCompletion;
  } else if (r.path == "/v1/messages") {
    api = Api::kMessages;
  } else if (r.path == "/v1/messages/count_tokens") {
    api = Api::kCountTokens;
  } else if (r.path == "/v1/responses") {
    api = Api::kResponses;
  } else {
    return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  http::Limits limits;
  limits.max_header = 4u << 10;
  limits.max_body = 16u << 10;
  Wire wire(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), data[0]);
  std::string buffer;  // received, not yet parsed (a pipelined request may wait here)
  volatile size_t sink = 0;
  for (int n = 0; n < 64; ++n) {
    http::RequestParser parser;
    http::StartRequest(parser, limits);
    parser.eager(false);
    boost::beast::error_code ec =
        Feed(parser, buffer, wire, [&] { return parser.is_header_done(); });
    if (ec) {
      const int status = http::ParserErrorStatus(ec);
      Require(status == 0 || status == 400 || status == 431);
      Require(ec != bhttp::error::header_limit || status == 431);
      return 0;  // answered (or closed): the connection ends
    }
    const auto length = parser.content_length();
    const bool expects = parser.get().count(bhttp::field::expect) != 0;
    const http::HeaderVerdict verdict = http::CheckHeader(parser, limits);
    Require(!length || *length <= limits.max_body || verdict.status == 413 ||
            verdict.status == 417);
    Require(verdict.status != 417 || expects);
    Require(!verdict.send_continue || (expects && parser.get().version() >= 11));
    if (verdict.status != 0) return 0;
    parser.eager(true);
    ec = Feed(parser, buffer, wire, [&] { return parser.is_done(); });
    if (ec == bhttp::error::partial_message) return 0;  // cut short: closed, no answer
    if (ec) {
      const int status = http::ParserErrorStatus(ec);
      Require(status == 400 || status == 413);
      Require(ec != bhttp::error::body_limit || status == 413);
      return 0;
    }
    http::Request req;
    http::FillRequestHeader(parser, req);
    req.body = std::move(parser.get().body());
    Require(req.body.size() <= limits.max_body);  // the limit holds for every encoding
    Require(req.path.size() <= req.target.size());
    sink = sink + req.get_header_value("content-type").size() + req.has_param("stream") +
           req.get_param_value("model").size();
    Api api;
    if (RouteOf(req, api)) sink = sink + crossword::fuzz::RunRequestPath(api, req.body);
    if (!http::KeepsAlive(parser)) return 0;  // Connection: close, HTTP/1.0: no next request
  }
  (void)sink;
  return 0;
}
