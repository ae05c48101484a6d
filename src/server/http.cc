// HttpServer: Beast's request parser fed by Asio reads on one I/O thread (deadlines by a timer
// that cancels the read), handlers on a worker pool that writes the answer with poll()-bounded
// sends. See http.h for the model.
#include "server/http.h"

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "server/http_framing.h"

namespace crossword::server::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

std::string Str(beast::string_view v) { return std::string(v.data(), v.size()); }

std::chrono::milliseconds Ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// Sends all of `data` on a non-blocking socket, waiting (poll) at most until `deadline`.
bool SendAll(int fd, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000))) < 0 && errno != EINTR)
        return false;
      continue;
    }
    return false;
  }
  return true;
}

std::string StatusLine(int status) {
  const std::string reason = Str(bhttp::obsolete_reason(static_cast<bhttp::status>(status)));
  return "HTTP/1.1 " + std::to_string(status) + " " + (reason.empty() ? "Unknown" : reason) +
         "\r\n";
}

}  // namespace

void Response::set_content(std::string content, std::string_view content_type) {
  body = std::move(content);
  set_header("Content-Type", std::string(content_type));
}

void Response::set_header(std::string_view name, std::string value) {
  for (auto& h : headers) {
    if (SameFieldName(h.first, name)) {
      h.second = std::move(value);
      return;
    }
  }
  headers.emplace_back(std::string(name), std::move(value));
}

std::string Response::get_header_value(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (SameFieldName(k, name)) return v;
  return "";
}

void Response::set_redirect(std::string url) {
  status = 302;
  set_header("Location", std::move(url));
}

void Response::set_chunked_content_provider(std::string_view content_type, ContentProvider p,
                                            std::function<void(bool)> on_release) {
  set_header("Content-Type", std::string(content_type));
  provider = std::move(p);
  release = std::move(on_release);
}

struct HttpServer::Impl {
  explicit Impl(Limits l) : limits(l), workers(static_cast<size_t>(std::max(1, l.threads))) {}

  Limits limits;
  net::io_context io;  // run by one thread: connection state is only touched there
  tcp::acceptor acceptor{io};
  net::thread_pool workers;
  std::map<std::pair<std::string, std::string>, Handler> routes;  // (method, path)
  std::set<std::string> paths;
  std::function<bool(const Request&, Response&)> pre_routing;
  std::function<void(const Request&, Response&)> error_body;
  std::function<void(const Request&, const Response&)> logger;

  std::atomic<bool> stop_requested{false};
  std::mutex mu;
  std::condition_variable cv;
  std::set<std::shared_ptr<Conn>> conns;  // I/O thread only

  void Accept();
  void Dispatch(const Request& req, Response& res) const;
  void Error(const Request& req, Response& res, int status) const {
    res.status = status;
    if (res.body.empty() && error_body) error_body(req, res);
  }
};

/// One connection. Its reads and state changes run on the I/O thread; while a handler runs
/// (`handling`) the worker owns the socket and nothing else touches it.
struct HttpServer::Conn : std::enable_shared_from_this<Conn> {
  Conn(Impl& s, tcp::socket sock) : srv(s), socket(std::move(sock)), timer(socket.get_executor()) {
    boost::system::error_code ec;
    auto ep = socket.remote_endpoint(ec);
    if (!ec) {
      remote_addr = ep.address().to_string();
      remote_port = ep.port();
    }
    socket.set_option(tcp::no_delay(true), ec);  // SSE chunks are small
    socket.native_non_blocking(true, ec);        // the workers' sends poll
  }

  Impl& srv;
  tcp::socket socket;
  // The deadline of the read in progress: at expiry the read is cancelled (not the socket closed,
  // as beast::tcp_stream would, so that the client still hears 408).
  net::steady_timer timer;
  bool timed_out = false;
  uint64_t generation = 0;  // of the deadline armed last
  beast::flat_buffer buffer;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser;
  std::string remote_addr;
  int remote_port = 0;
  bool handling = false;
  bool closed = false;
  bool first = true;
  Clock::time_point started;  // this request's first read

  int fd() { return socket.native_handle(); }

  void Arm(Clock::time_point deadline) {
    timed_out = false;
    const uint64_t g = ++generation;
    timer.expires_at(deadline);
    timer.async_wait([self = shared_from_this(), g](beast::error_code ec) {
      // Cancelled, or expired just after the read it guarded had ended.
      if (ec || g != self->generation) return;
      self->timed_out = true;
      boost::system::error_code e;
      self->socket.cancel(e);
    });
  }

  // Ends the deadline; returns whether it had passed (the read's error is then the timeout).
  bool Disarm() {
    ++generation;
    timer.cancel();
    return timed_out;
  }

  // Waits for the next request (the buffer may already hold it: pipelining).
  void ReadHeader() {
    if (srv.stop_requested.load()) return Close();
    parser.emplace();
    StartRequest(*parser, srv.limits);
    started = Clock::now();
    // A new connection must send its header within the header deadline; an idle keep-alive
    // one gets the keep-alive time to start, plus the header deadline.
    const double wait = first || buffer.size() > 0
                            ? srv.limits.header_timeout_s
                            : srv.limits.keep_alive_timeout_s + srv.limits.header_timeout_s;
    first = false;
    Arm(started + Ms(std::min(wait, srv.limits.request_timeout_s)));
    bhttp::async_read_header(
        socket, buffer, *parser,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  Request Partial() {
    Request r;
    r.remote_addr = remote_addr;
    r.remote_port = remote_port;
    r.fd = -1;
    if (parser) FillRequestHeader(*parser, r);
    return r;
  }

  // Answers an error the transport found, then closes (the rest of the request is not read).
  void Fail(int status, const beast::error_code& why = {}) {
    Request req = Partial();
    Response res;
    if (why) res.transport_error = why.message();
    srv.Error(req, res, status);
    std::string out = StatusLine(status);
    for (const auto& [k, v] : res.headers) out += k + ": " + v + "\r\n";
    out += "Content-Length: " + std::to_string(res.body.size()) + "\r\nConnection: close\r\n\r\n";
    out += res.body;
    SendAll(fd(), out, Clock::now());  // a small answer on an idle socket: no waiting here
    if (srv.logger && !req.method.empty()) srv.logger(req, res);
    Linger();
  }

  // Closes after the answer without resetting it away: half-close, then discard what the client
  // still sends for a moment (closing with unread data would send RST, and the client might lose
  // the answer).
  void Linger() {
    boost::system::error_code ec;
    socket.shutdown(tcp::socket::shutdown_send, ec);
    Arm(Clock::now() + std::chrono::seconds(1));
    auto scratch = std::make_shared<std::array<char, 16384>>();
    auto self = shared_from_this();
    auto step = std::make_shared<std::function<void(beast::error_code, size_t)>>();
    *step = [self, scratch, step](beast::error_code e, size_t) {
      if (e) {
        self->Close();
        *step = nullptr;  // breaks the cycle
        return;
      }
      self->socket.async_read_some(net::buffer(*scratch), *step);
    };
    socket.async_read_some(net::buffer(*scratch), *step);
  }

  void Close() {
    if (closed) return;
    closed = true;
    boost::system::error_code ec;
    timer.cancel();
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
    srv.conns.erase(shared_from_this());
  }

  void OnHeader(beast::error_code ec) {
    const bool late = Disarm();
    if (closed) return;
    if (ec) {
      if (late) {
        // Only a client that began a request hears why; an idle one is just closed.
        if (buffer.size() > 0) return Fail(408);
        return Close();
      }
      if (ec == net::error::operation_aborted || ec == net::error::eof ||
          ec == net::error::connection_reset || !parser)
        return Close();
      // 431, 400 (malformed: a negative or non-numeric Content-Length, ...), or cut short.
      const int status = ParserErrorStatus(ec);
      return status == 0 ? Close() : Fail(status, ec);
    }
    const HeaderVerdict verdict = CheckHeader(*parser, srv.limits);
    if (verdict.status != 0) return Fail(verdict.status);
    if (verdict.send_continue) SendAll(fd(), "HTTP/1.1 100 Continue\r\n\r\n", Clock::now());
    Arm(started + Ms(srv.limits.request_timeout_s));
    bhttp::async_read(
        socket, buffer, *parser,
        [self = shared_from_this()](beast::error_code e, size_t) { self->OnBody(e); });
  }

  void OnBody(beast::error_code ec) {
    const bool late = Disarm();
    if (closed) return;
    if (ec) {
      if (ec == bhttp::error::body_limit) return Fail(413);
      if (late) return Fail(408);
      if (ec == net::error::operation_aborted || ec == net::error::eof ||
          ec == net::error::connection_reset || ec == bhttp::error::partial_message)
        return Close();
      const int status = ParserErrorStatus(ec);  // 400, or end_of_stream
      return status == 0 ? Close() : Fail(status, ec);
    }
    if (srv.stop_requested.load()) return Close();
    handling = true;
    net::post(srv.workers, [self = shared_from_this()] { self->Handle(); });
  }

  // Worker thread: run the handler, write the answer, hand the connection back.
  void Handle() {
    Request req = Partial();
    req.fd = fd();
    req.body = std::move(parser->get().body());
    const bool client_keeps = KeepsAlive(*parser);
    Response res;
    srv.Dispatch(req, res);
    const bool keep = client_keeps && !srv.stop_requested.load();
    const bool ok = Write(req, res, keep);
    if (srv.logger) srv.logger(req, res);
    net::post(srv.io, [self = shared_from_this(), again = ok && keep] {
      self->handling = false;
      if (again) {
        self->ReadHeader();
      } else {
        self->Close();
      }
    });
  }

  class Sink : public DataSink {
   public:
    Sink(Conn& c, bool chunked) : c_(c), chunked_(chunked) {}
    bool write(const char* data, size_t size) override {
      if (failed_) return false;
      if (size == 0) return true;
      std::string out;
      if (chunked_) {
        char head[24];
        std::snprintf(head, sizeof(head), "%zx\r\n", size);
        out = head;
        out.append(data, size);
        out += "\r\n";
      } else {
        out.assign(data, size);
      }
      failed_ = !SendAll(c_.fd(), out, Clock::now() + Ms(c_.srv.limits.write_timeout_s));
      offset_ += size;
      return !failed_;
    }
    void done() override {
      if (done_) return;
      done_ = true;
      if (chunked_ && !failed_)
        failed_ = !SendAll(c_.fd(), "0\r\n\r\n", Clock::now() + Ms(c_.srv.limits.write_timeout_s));
    }
    bool is_done() const { return done_; }
    bool failed() const { return failed_; }
    size_t offset() const { return offset_; }

   private:
    Conn& c_;
    bool chunked_;
    bool done_ = false, failed_ = false;
    size_t offset_ = 0;
  };

  // Returns whether the connection can carry another request.
  bool Write(const Request& req, Response& res, bool keep) {
    const bool streamed = static_cast<bool>(res.provider);
    const bool chunked = streamed && req.version >= 11;
    if (streamed && !chunked) keep = false;  // HTTP/1.0: the body ends with the connection
    std::string head = StatusLine(res.status);
    for (const auto& [k, v] : res.headers) head += k + ": " + v + "\r\n";
    if (chunked) {
      head += "Transfer-Encoding: chunked\r\n";
    } else if (!streamed) {
      head += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
    }
    head += keep ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    const auto deadline = Clock::now() + Ms(srv.limits.write_timeout_s);
    if (!streamed) {
      if (req.method == "HEAD") return SendAll(fd(), head, deadline) && keep;
      head += res.body;
      return SendAll(fd(), head, deadline) && keep;
    }
    bool ok = SendAll(fd(), head, deadline);
    Sink sink(*this, chunked);
    try {
      while (ok && !sink.is_done()) {
        if (!res.provider(sink.offset(), sink) || sink.failed()) ok = false;
      }
    } catch (...) {
      ok = false;
    }
    if (res.release) res.release(ok && sink.is_done());
    return ok && keep;
  }
};

void HttpServer::Impl::Dispatch(const Request& req, Response& res) const {
  try {
    if (pre_routing && pre_routing(req, res)) return;
    auto it = routes.find({req.method, req.path});
    if (it == routes.end() && req.method == "HEAD") it = routes.find({"GET", req.path});
    if (it == routes.end()) {
      const bool known = paths.count(req.path) != 0;
      if (known) {
        std::string allow;
        for (const auto& [k, h] : routes)
          if (k.second == req.path) allow += (allow.empty() ? "" : ", ") + k.first;
        res.set_header("Allow", allow);
      }
      return Error(req, res, known ? 405 : 404);
    }
    it->second(req, res);
  } catch (...) {
    res = Response();
    Error(req, res, 500);
  }
}

void HttpServer::Impl::Accept() {
  acceptor.async_accept(net::make_strand(io), [this](beast::error_code ec, tcp::socket sock) {
    if (ec) {
      if (!acceptor.is_open()) return;
      // Out of descriptors and the like: try again shortly rather than spin.
      auto t = std::make_shared<net::steady_timer>(io, std::chrono::milliseconds(50));
      t->async_wait([this, t](beast::error_code) { Accept(); });
      return;
    }
    auto c = std::make_shared<Conn>(*this, std::move(sock));
    conns.insert(c);
    c->ReadHeader();
    Accept();
  });
}

HttpServer::HttpServer(Limits limits) : impl_(std::make_shared<Impl>(limits)) {}

HttpServer::~HttpServer() {
  Stop();
  impl_->workers.join();
}

void HttpServer::Route(const std::string& method, const std::string& path, Handler h) {
  impl_->routes[{method, path}] = std::move(h);
  impl_->paths.insert(path);
}

void HttpServer::SetPreRouting(std::function<bool(const Request&, Response&)> f) {
  impl_->pre_routing = std::move(f);
}

void HttpServer::SetErrorBody(std::function<void(const Request&, Response&)> f) {
  impl_->error_body = std::move(f);
}

void HttpServer::SetLogger(std::function<void(const Request&, const Response&)> f) {
  impl_->logger = std::move(f);
}

int HttpServer::Bind(const std::string& host, int port) {
  Impl& s = *impl_;
  boost::system::error_code ec;
  const auto addr = net::ip::make_address(host, ec);
  if (ec) return -1;
  const tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  s.acceptor.open(ep.protocol(), ec);
  if (ec) return -1;
  // SO_REUSEADDR only (no SO_REUSEPORT): restarts quickly, refuses a port in use.
  s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  s.acceptor.bind(ep, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    s.acceptor.close(ec);
    return -1;
  }
  return s.acceptor.local_endpoint().port();
}

void HttpServer::Run() {
  Impl& s = *impl_;
  if (!s.acceptor.is_open()) return;
  auto guard = net::make_work_guard(s.io);
  net::post(s.io, [&s] { s.Accept(); });
  std::thread io_thread([&s] { s.io.run(); });
  {
    std::unique_lock lk(s.mu);
    s.cv.wait(lk, [&s] { return s.stop_requested.load(); });
  }
  // Stop listening and close every connection not in a handler (idle keep-alive ones included,
  // at once); handlers finish (they see stopping()) and close theirs.
  std::promise<void> closed;
  net::post(s.io, [&s, &closed] {
    boost::system::error_code ec;
    s.acceptor.close(ec);
    std::vector<std::shared_ptr<Conn>> idle;
    for (const auto& c : s.conns)
      if (!c->handling) idle.push_back(c);
    for (const auto& c : idle) c->Close();
    closed.set_value();
  });
  // From here no request is handed to the workers (the I/O thread sees stop_requested).
  closed.get_future().wait();
  s.workers.wait();
  guard.reset();
  io_thread.join();
}

void HttpServer::Stop() {
  {
    std::lock_guard lk(impl_->mu);
    impl_->stop_requested.store(true);
  }
  impl_->cv.notify_all();
}

bool HttpServer::stopping() const { return impl_->stop_requested.load(); }

}  // namespace crossword::server::http
