// The servers of `crossword bench serve --spawn` (see serve_bench_spawn.h).
#include "tools/serve_bench_spawn.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "base/error.h"

namespace crossword::tools::servebench {
namespace {

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  Check(fd >= 0, "--spawn: socket() failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  Check(ok, "--spawn: cannot find a free port");
  return ntohs(a.sin_port);
}

void ReplaceAll(std::string& s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
}

}  // namespace

std::string ExpandCommand(const std::string& command_template, int port, int64_t ctx) {
  Check(command_template.find("{port}") != std::string::npos,
        "--spawn: the command must contain {{port}} (got '{}')", command_template);
  std::string cmd = command_template;
  ReplaceAll(cmd, "{port}", std::to_string(port));
  ReplaceAll(cmd, "{ctx}", std::to_string(ctx));
  return cmd;
}

double StatusMiB(pid_t pid, const char* key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0)
      return std::strtod(line.c_str() + std::strlen(key), nullptr) / 1024.0;
  }
  return -1;
}

SpawnedServer::SpawnedServer(const std::string& command_template, int64_t ctx,
                             const std::string& log_path, double timeout_s, Target& target) {
  const int port = FreePort();
  command_ = ExpandCommand(command_template, port, ctx);
  log_ = log_path;
  pid_ = fork();
  Check(pid_ >= 0, "--spawn: fork failed");
  if (pid_ == 0) {
    setpgid(0, 0);
    FILE* f = std::fopen(log_.c_str(), "a");
    if (f) {
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
    }
    const std::string exec_cmd = "exec " + command_;  // the shell becomes the server: one pid
    execl("/bin/sh", "sh", "-c", exec_cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid_, pid_);
  target.host = "127.0.0.1";
  target.port = port;
  try {
    WaitReady(target, timeout_s);
  } catch (...) {
    Stop();  // the constructor did not finish: no destructor will run
    throw;
  }
}

void SpawnedServer::WaitReady(const Target& target, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      Fail("--spawn: the server exited before it was ready (status {}); its log: {}", status, log_);
    }
    if (HttpGet(target, "/health", nullptr, 2) == 200) break;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Check(waited < timeout_s, "--spawn: the server was not ready after {} s; its log: {}",
          timeout_s, log_);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ready_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void SpawnedServer::Stop() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(-pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

}  // namespace crossword::tools::servebench
