// /proc sampling and the repeat rule of the load guard (see load_guard.h). Field positions follow
// proc(5): /proc/stat "cpu" lines, /proc/PID/stat fields 14-17 (utime stime cutime cstime).
#include "tools/load_guard.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace crossword::tools::servebench {

CpuTimes ReadCpuTimes(const std::string& root, const std::vector<pid_t>& pids) {
  CpuTimes t;
  std::ifstream stat(root + "/stat");
  Check(stat.good(), "load guard: cannot read {}/stat", root);
  std::string line;
  bool got_total = false;
  while (std::getline(stat, line)) {
    if (line.rfind("cpu", 0) != 0) continue;
    std::istringstream in(line);
    std::string name;
    in >> name;
    if (name != "cpu") {
      ++t.cpus;
      continue;
    }
    uint64_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // user nice system idle iowait irq softirq steal
    int n = 0;
    while (n < 8 && in >> v[n]) ++n;
    Check(n >= 4, "load guard: malformed cpu line in {}/stat: '{}'", root, line);
    t.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    t.total = t.busy + v[3] + v[4];
    got_total = true;
  }
  Check(got_total && t.cpus > 0, "load guard: no cpu lines in {}/stat", root);
  for (pid_t pid : pids) {
    std::ifstream ps(root + "/" + std::to_string(pid) + "/stat");
    std::string text;
    if (!std::getline(ps, text)) continue;  // gone: counts 0
    // comm may hold spaces and parentheses: the fields start after the last ')'.
    const size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream in(text.substr(close + 1));
    std::string field;
    uint64_t sum = 0;
    for (int i = 3; i <= 17 && in >> field; ++i) {
      if (i >= 14) sum += std::strtoull(field.c_str(), nullptr, 10);
    }
    t.own += sum;
  }
  return t;
}

double OtherCores(const CpuTimes& before, const CpuTimes& after) {
  if (after.total <= before.total || after.cpus <= 0) return 0;
  const double elapsed_one_cpu =
      static_cast<double>(after.total - before.total) / static_cast<double>(after.cpus);
  const double busy = static_cast<double>(after.busy) - static_cast<double>(before.busy);
  const double own = static_cast<double>(after.own) - static_cast<double>(before.own);
  const double other = busy - own;
  return other > 0 ? other / elapsed_one_cpu : 0;
}

double LoadAverage1(const std::string& root) {
  std::ifstream in(root + "/loadavg");
  double a = -1;
  if (!(in >> a)) return -1;
  return a;
}

LoadGuard::LoadGuard(std::string root, std::vector<pid_t> watched, double max_other_cores,
                     int max_repeats)
    : root_(std::move(root)),
      watched_(std::move(watched)),
      max_other_cores_(max_other_cores),
      max_repeats_(max_repeats) {}

void LoadGuard::Begin() { begin_ = ReadCpuTimes(root_, watched_); }

GuardSample LoadGuard::End() {
  const CpuTimes end = ReadCpuTimes(root_, watched_);
  GuardSample s;
  s.other_cores = OtherCores(begin_, end);
  s.loadavg = LoadAverage1(root_);
  s.busy = max_other_cores_ >= 0 && s.other_cores > max_other_cores_;
  return s;
}

bool LoadGuard::ShouldRepeat(const GuardSample& sample, int attempt) const {
  return sample.busy && attempt < max_repeats_;
}

namespace {

// Inodes of sockets listening on `port` in one /proc/net/tcp-format file.
void ListeningInodes(const std::string& path, int port, std::vector<std::string>& inodes) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, state, skip, inode;
    if (!(f >> sl >> local >> remote >> state)) continue;
    for (int i = 0; i < 5; ++i) f >> skip;  // tx:rx tr:when retrnsmt uid timeout
    if (!(f >> inode)) continue;
    const size_t colon = local.rfind(':');
    if (colon == std::string::npos || state != "0A") continue;  // 0A = LISTEN
    if (std::strtol(local.c_str() + colon + 1, nullptr, 16) == port) inodes.push_back(inode);
  }
}

}  // namespace

pid_t FindListeningPid(const std::string& root, int port) {
  std::vector<std::string> inodes;
  ListeningInodes(root + "/net/tcp", port, inodes);
  ListeningInodes(root + "/net/tcp6", port, inodes);
  if (inodes.empty()) return -1;
  DIR* procs = opendir(root.c_str());
  if (!procs) return -1;
  pid_t found = -1;
  while (dirent* e = readdir(procs)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    const std::string fd_dir = root + "/" + e->d_name + "/fd";
    DIR* fds = opendir(fd_dir.c_str());
    if (!fds) continue;
    while (dirent* f = readdir(fds)) {
      char target[128];
      const ssize_t n = readlink((fd_dir + "/" + f->d_name).c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      for (const std::string& inode : inodes) {
        if (std::string(target) == "socket:[" + inode + "]") found = static_cast<pid_t>(pid);
      }
      if (found > 0) break;
    }
    closedir(fds);
    if (found > 0) break;
  }
  closedir(procs);
  return found;
}

}  // namespace crossword::tools::servebench
