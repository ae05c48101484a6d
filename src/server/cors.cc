// CORS decisions (cors.h).
#include "server/cors.h"

namespace crossword::server {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool OriginIsLocalhost(std::string_view origin) {
  if (const size_t scheme = origin.find("://"); scheme != std::string_view::npos) {
    origin.remove_prefix(scheme + 3);
  }
  std::string_view host;
  if (!origin.empty() && origin.front() == '[') {  // [::1]:port
    const size_t close = origin.find(']');
    if (close == std::string_view::npos) return false;
    host = origin.substr(1, close - 1);
    origin.remove_prefix(close + 1);
  } else {
    const size_t end = origin.find_first_of(":/");
    host = origin.substr(0, end);
    origin.remove_prefix(end == std::string_view::npos ? origin.size() : end);
  }
  // What follows the host may only be a port and a trailing slash.
  if (!origin.empty() && origin.front() == ':') {
    origin.remove_prefix(1);
    while (!origin.empty() && origin.front() >= '0' && origin.front() <= '9')
      origin.remove_prefix(1);
  }
  if (!origin.empty() && origin != "/") return false;
  return host == "localhost" || host == "127.0.0.1" || host == "::1";
}

std::string AllowedOrigin(const ServerOptions::Cors& cors, std::string_view origin) {
  const std::string_view list = Trim(cors.origins);
  if (list == "*") return cors.credentials && !origin.empty() ? std::string(origin) : "*";
  if (origin.empty()) return "";
  if (list == "localhost") return OriginIsLocalhost(origin) ? std::string(origin) : "";
  std::string_view rest = list;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    if (Trim(rest.substr(0, comma)) == origin) return std::string(origin);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return "";
}

std::vector<std::pair<std::string, std::string>> CorsHeaders(const ServerOptions::Cors& cors,
                                                             std::string_view origin,
                                                             bool preflight) {
  std::vector<std::pair<std::string, std::string>> h;
  std::string allowed = AllowedOrigin(cors, origin);
  if (!allowed.empty()) {
    const bool any = allowed == "*";
    h.emplace_back("Access-Control-Allow-Origin", std::move(allowed));
    if (!any) h.emplace_back("Vary", "Origin");  // the answer depends on the request's Origin
  }
  if (preflight) {
    h.emplace_back("Access-Control-Allow-Credentials", cors.credentials ? "true" : "false");
    h.emplace_back("Access-Control-Allow-Methods", cors.methods);
    h.emplace_back("Access-Control-Allow-Headers", cors.headers);
  }
  return h;
}

}  // namespace crossword::server
