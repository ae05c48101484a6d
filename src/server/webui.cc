// The chat page's files, linked into the binary by src/server/CMakeLists.txt (.incbin, in the
// order of WEBUI_FILES there), served at / with --no-webui turning them off.
#include <string_view>

#include "server/server_impl.h"

extern "C" {
extern const char crossword_webui_0_begin[], crossword_webui_0_end[];
extern const char crossword_webui_1_begin[], crossword_webui_1_end[];
extern const char crossword_webui_2_begin[], crossword_webui_2_end[];
}

namespace crossword::server {

namespace {

struct WebFile {
  const char* path;
  const char* type;
  const char* begin;
  const char* end;
};

constexpr WebFile kFiles[] = {
    {"/", "text/html; charset=utf-8", crossword_webui_0_begin, crossword_webui_0_end},
    {"/app.js", "text/javascript; charset=utf-8", crossword_webui_1_begin, crossword_webui_1_end},
    {"/style.css", "text/css; charset=utf-8", crossword_webui_2_begin, crossword_webui_2_end},
};

}  // namespace

void Server::Impl::RouteWebUi() {
  if (options.no_webui) return;
  for (const WebFile& f : kFiles) {
    const std::string_view body(f.begin, static_cast<size_t>(f.end - f.begin));
    const char* type = f.type;
    // The files hold no secrets; the page asks for the API key and sends it with API calls.
    Route("GET", f.path,
          [body, type](const http::Request&, http::Response& res) {
            res.set_header("Cache-Control", "no-cache");
            // Nothing but this server: no CDN, no inline code, no other origin.
            res.set_header("Content-Security-Policy",
                           "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
            res.set_header("X-Content-Type-Options", "nosniff");
            res.set_content(std::string(body), type);
          },
          {.needs_model = false, .open = true});
  }
  Route("GET", "/index.html",
        [](const http::Request&, http::Response& res) { res.set_redirect("/"); },
        {.needs_model = false, .open = true});
}

}  // namespace crossword::server
