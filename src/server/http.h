// The server's HTTP/1.1 transport (Boost.Beast's parser over Boost.Asio): a small,
// transport-neutral request/response/route interface and the server that enforces the limits.
//
// Why not cpp-httplib (Debian's 0.11.4, used before): it applies --max-body-size only to bodies
// with a Content-Length (a chunked body grows without bound), has no deadline for a whole header
// or body (a client trickling a byte per read timeout holds a worker thread forever), answers an
// oversized Content-Length only after reading (or timing out on) the body, sends 100 Continue
// before checking the length, drops pipelined requests, sends chunked bodies to HTTP/1.0 clients
// and waits out the keep-alive timeout on stop. See docs/server.md ("HTTP transport").
//
// Model: one I/O thread reads every connection asynchronously (headers and bodies, under
// deadlines, holding no worker); a complete request is handed to a pool of worker threads, which
// run the (blocking) handler and write the answer on the socket themselves, then hand the
// connection back for its next (possibly already pipelined) request.
//
// The member names of Request and Response follow cpp-httplib's (body, status, set_content,
// set_header, get_header_value, set_chunked_content_provider), so handlers written for it port
// unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace crossword::server::http {

/// One parsed request. Valid while its handler runs.
struct Request {
  std::string method;  ///< "GET", "POST", ...
  std::string target;  ///< as sent: path and query
  std::string path;    ///< target before '?', percent-decoded
  std::string query;   ///< target after '?' ("" when none)
  int version = 11;    ///< 10 (HTTP/1.0) or 11
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string remote_addr;
  int remote_port = 0;
  int fd = -1;  ///< the connection's socket (for PeerClosed); -1 for requests made in tests

  /// The first header of that name (ASCII case-insensitive), "" when absent.
  std::string get_header_value(std::string_view name) const;
  bool has_header(std::string_view name) const;
  /// Whether the query has that parameter (`name` or `name=...`; not percent-decoded).
  bool has_param(std::string_view name) const;
  /// The parameter's value ("" when absent or valueless; not percent-decoded).
  std::string get_param_value(std::string_view name) const;
  /// Whether the client closed or reset its connection (a half-close counts as gone).
  bool PeerClosed() const;
};

/// Where a streamed answer is written (a streaming handler's provider gets one).
class DataSink {
 public:
  virtual ~DataSink() = default;
  /// Sends bytes now; false when the client is gone or too slow (the provider should return).
  virtual bool write(const char* data, size_t size) = 0;
  /// Ends the body (chunked: the final chunk). The provider is not called again.
  virtual void done() = 0;
};

struct Response {
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  ///< besides Content-Length etc.

  /// Called until it calls sink.done() or returns false (the answer is then cut).
  using ContentProvider = std::function<bool(size_t offset, DataSink& sink)>;
  ContentProvider provider;
  std::function<void(bool success)> release;  ///< after the stream ends; success: done() reached
  /// For errors the transport answers itself: what was wrong (e.g. the parser's message).
  std::string transport_error;

  void set_content(std::string content, std::string_view content_type);
  /// Sets a header, replacing one of the same name.
  void set_header(std::string_view name, std::string value);
  std::string get_header_value(std::string_view name) const;
  /// 302 to `url`.
  void set_redirect(std::string url);
  /// A streamed answer: chunked for HTTP/1.1, raw then close for HTTP/1.0.
  void set_chunked_content_provider(std::string_view content_type, ContentProvider p,
                                    std::function<void(bool)> on_release = {});
};

using Handler = std::function<void(const Request&, Response&)>;

struct Limits {
  size_t max_body = 8u << 20;       ///< larger bodies, any encoding: 413 (417 with Expect)
  size_t max_header = 64u << 10;    ///< request line and headers: larger gets 431
  double header_timeout_s = 10;     ///< the whole header must arrive within this (408 after)
  double request_timeout_s = 60;    ///< the whole request, header and body (408 after)
  double keep_alive_timeout_s = 5;  ///< an idle keep-alive connection is closed after this
  double write_timeout_s = 60;      ///< one write blocked for longer cuts the connection
  int threads = 16;                 ///< worker threads running handlers
};

/// The HTTP server. Route(), SetPreRouting(), SetErrorBody() and SetLogger() before Run().
class HttpServer {
 public:
  explicit HttpServer(Limits limits);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// An exact path (no pattern). Another method on a routed path gets 405.
  void Route(const std::string& method, const std::string& path, Handler h);
  /// Runs before routing; returns true when it answered (e.g. 401).
  void SetPreRouting(std::function<bool(const Request&, Response&)> f);
  /// Fills the body of an error the transport or router answers itself (400, 404, 405, 408,
  /// 413, 417, 431, 500) when the response has none. The request may lack its body.
  void SetErrorBody(std::function<void(const Request&, Response&)> f);
  /// Called once per answered request, after the answer is written (or cut).
  void SetLogger(std::function<void(const Request&, const Response&)> f);

  /// Binds and listens; port 0 picks a free one. Returns the port, or -1 (errno-style failure).
  int Bind(const std::string& host, int port);
  /// Serves until Stop() (returns at once if Stop() came first); handlers still running are
  /// waited for, idle connections are closed at once.
  void Run();
  /// Any thread, idempotent; may precede Run().
  void Stop();
  bool stopping() const;

 private:
  struct Impl;
  struct Conn;
  std::shared_ptr<Impl> impl_;
};

}  // namespace crossword::server::http
