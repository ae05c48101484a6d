// Request framing with Beast's parser: limits, header checks, header -> Request. See
// http_framing.h.
#include "server/http_framing.h"

#include <poll.h>

#include <algorithm>
#include <boost/beast/http/error.hpp>
#include <cstdint>
#include <limits>
#include <optional>

namespace crossword::server::http {

namespace bhttp = boost::beast::http;

namespace {

std::string Str(boost::beast::string_view v) { return std::string(v.data(), v.size()); }

}  // namespace

bool SameFieldName(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string Request::get_header_value(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (SameFieldName(k, name)) return v;
  return "";
}

bool Request::has_header(std::string_view name) const {
  for (const auto& h : headers)
    if (SameFieldName(h.first, name)) return true;
  return false;
}

namespace {

// Finds `name` among the '&'-separated parameters of `query`: its value, or nullopt.
std::optional<std::string> FindParam(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    const size_t eq = item.find('=');
    if (item.substr(0, eq) == name)
      return eq == std::string_view::npos ? std::string() : std::string(item.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

}  // namespace

bool Request::has_param(std::string_view name) const { return FindParam(query, name).has_value(); }

std::string Request::get_param_value(std::string_view name) const {
  return FindParam(query, name).value_or("");
}

bool Request::PeerClosed() const {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

void StartRequest(RequestParser& parser, const Limits& limits) {
  parser.header_limit(static_cast<std::uint32_t>(
      std::min<size_t>(limits.max_header, std::numeric_limits<std::uint32_t>::max())));
  // The length is checked once the header is complete (413 or 417). Not boost::none: Beast
  // 1.74 compares a Content-Length with the optional, and any length exceeds "none".
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
}

HeaderVerdict CheckHeader(RequestParser& parser, const Limits& limits) {
  const auto& m = parser.get();
  const auto expect = m[bhttp::field::expect];
  const bool expect_continue =
      SameFieldName(std::string_view(expect.data(), expect.size()), "100-continue");
  if (const auto len = parser.content_length(); len && *len > limits.max_body) {
    return {.status = expect_continue ? 417 : 413};
  }
  parser.body_limit(static_cast<std::uint64_t>(limits.max_body));
  return {.send_continue = expect_continue && m.version() >= 11 && !parser.is_done()};
}

int ParserErrorStatus(const boost::beast::error_code& ec) {
  if (ec == bhttp::error::header_limit) return 431;
  if (ec == bhttp::error::body_limit) return 413;
  if (ec == bhttp::error::end_of_stream) return 0;
  return 400;
}

void FillRequestHeader(const RequestParser& parser, Request& r) {
  const auto& m = parser.get();
  r.method = Str(m.method_string());
  r.target = Str(m.target());
  r.version = static_cast<int>(m.version());
  const size_t q = r.target.find('?');
  r.path = PercentDecode(std::string_view(r.target).substr(0, q));
  r.query = q == std::string::npos ? "" : r.target.substr(q + 1);
  r.headers.clear();
  for (const auto& f : m) r.headers.emplace_back(Str(f.name_string()), Str(f.value()));
}

bool KeepsAlive(const RequestParser& parser) {
  return parser.keep_alive() && parser.get().version() >= 11;
}

std::string PercentDecode(std::string_view in) {
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%' && i + 2 < in.size() && hex(in[i + 1]) >= 0 && hex(in[i + 2]) >= 0) {
      out += static_cast<char>(hex(in[i + 1]) * 16 + hex(in[i + 2]));
      i += 2;
    } else {
      out += in[i];
    }
  }
  return out;
}

}  // namespace crossword::server::http
