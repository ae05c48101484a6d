// CORS for `crossword serve` (llama-server's --cors-origins / --cors-methods / --cors-headers /
// --cors-credentials): which Origin gets an Access-Control-Allow-Origin answer. Transport-neutral:
// the server's pre-routing step asks these functions and sets the headers they return.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/server.h"

namespace crossword::server {

/// Whether `origin` ("http://localhost:8080", "localhost", "https://[::1]") names this machine:
/// localhost, 127.0.0.1 or ::1, with or without a scheme and port.
bool OriginIsLocalhost(std::string_view origin);

/// The Access-Control-Allow-Origin value for a request with Origin `origin` ("" when it sent
/// none), or "" when CORS does not allow it. `cors.origins`: "*" reflects the origin when
/// credentials are allowed (a browser refuses "*" with credentials) and is "*" otherwise;
/// "localhost" reflects a localhost origin; else a comma-separated list of exact origins.
std::string AllowedOrigin(const ServerOptions::Cors& cors, std::string_view origin);

/// The headers of a response: Access-Control-Allow-Origin when allowed and, for a preflight
/// (`preflight`, an OPTIONS request), Allow-Credentials, Allow-Methods and Allow-Headers.
std::vector<std::pair<std::string, std::string>> CorsHeaders(const ServerOptions::Cors& cors,
                                                             std::string_view origin,
                                                             bool preflight);

}  // namespace crossword::server
