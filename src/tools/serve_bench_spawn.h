// The servers `crossword bench serve --spawn` starts: a command template with {port} (and
// optionally {ctx}) run in its own process group, ready when /health answers 200, stopped on scope
// exit; and the resident memory of a process from /proc.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "tools/serve_bench_client.h"

namespace crossword::tools::servebench {

/// `command_template` with every {port} replaced by `port` and every {ctx} by `ctx` (the context
/// in tokens the step needs: prompt + answer). Throws crossword::Error when {port} is missing.
std::string ExpandCommand(const std::string& command_template, int port, int64_t ctx);

/// A memory figure of `pid` from /proc/PID/status in MiB: `key` is "VmRSS:" (resident now) or
/// "VmHWM:" (the kernel's high-water mark of resident memory). -1 when the process is gone.
double StatusMiB(pid_t pid, const char* key);

/// A server started by --spawn: `sh -c "exec COMMAND"` in its own process group on a free port,
/// output appended to `log_path`; the constructor returns when GET /health answers 200 and points
/// `target` at it. Throws crossword::Error when the server exits first or is not ready within
/// `timeout_s` (the process is stopped then). The destructor stops it (SIGTERM to the group, then
/// SIGKILL after 10 s).
class SpawnedServer {
 public:
  SpawnedServer(const std::string& command_template, int64_t ctx, const std::string& log_path,
                double timeout_s, Target& target);
  ~SpawnedServer() { Stop(); }
  SpawnedServer(const SpawnedServer&) = delete;
  SpawnedServer& operator=(const SpawnedServer&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& command() const { return command_; }
  double ready_s() const { return ready_s_; }  ///< seconds from start until /health answered

 private:
  void WaitReady(const Target& target, double timeout_s);
  void Stop();

  pid_t pid_ = -1;
  std::string command_, log_;
  double ready_s_ = 0;
};

}  // namespace crossword::tools::servebench
