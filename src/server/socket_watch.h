// Noticing that an HTTP client went away while its request waits or streams: cpp-httplib 0.11
// does not expose the connection's socket, so it is found by its address pair and polled.
#pragma once

#include <string>

namespace crossword::server {

/// The socket of one accepted connection, found by (local, remote) address and port. Valid for
/// as long as the HTTP handler of that connection runs (the library closes it afterwards).
class SocketWatch {
 public:
  /// Finds the connection's descriptor among this process's open sockets (/proc/self/fd).
  /// When none matches (not Linux, or already closed), PeerClosed() stays false.
  SocketWatch(const std::string& local_addr, int local_port, const std::string& remote_addr,
              int remote_port);

  bool found() const { return fd_ >= 0; }
  /// Whether the peer closed or reset the connection (POLLRDHUP / POLLHUP / POLLERR). A client
  /// that half-closes its sending side after the request counts as gone.
  bool PeerClosed() const;

 private:
  int fd_ = -1;
};

}  // namespace crossword::server
