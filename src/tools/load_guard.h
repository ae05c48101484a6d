// The load guard of `crossword bench serve`: CPU time other processes used during a benchmark step,
// from /proc, so that a step disturbed by another process is repeated (a bounded number of times)
// and the record of what was seen goes into the result.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace crossword::tools::servebench {

/// CPU times in clock ticks (USER_HZ) read from a /proc tree.
struct CpuTimes {
  uint64_t busy = 0;   ///< all CPUs: user + nice + system + irq + softirq + steal
  uint64_t total = 0;  ///< all CPUs: busy + idle + iowait
  int cpus = 0;        ///< "cpuN" lines of /proc/stat
  uint64_t own = 0;    ///< utime + stime + cutime + cstime of the watched processes
};

/// Reads `root`/stat and `root`/PID/stat of each of `pids` (a process that is gone counts 0).
/// Throws crossword::Error when `root`/stat is unreadable or malformed.
CpuTimes ReadCpuTimes(const std::string& root, const std::vector<pid_t>& pids);

/// Cores' worth of CPU the processes outside `pids` used between two samples: (busy - own) ticks
/// over the elapsed ticks of one CPU (total / cpus). 0 when no time elapsed.
double OtherCores(const CpuTimes& before, const CpuTimes& after);

/// The 1-minute load average from `root`/loadavg (-1 when unreadable).
double LoadAverage1(const std::string& root);

/// One guarded attempt of a step, as recorded in the result.
struct GuardSample {
  double other_cores = 0;
  double loadavg = -1;
  bool busy = false;  ///< other_cores > the threshold
};

/// Repeat logic: an attempt is repeated while the other processes used more than
/// `max_other_cores` cores and fewer than `max_repeats` repeats were made.
class LoadGuard {
 public:
  /// `root`: the /proc tree (a fake one in tests); `watched`: the benchmark's own processes (this
  /// one and the server). max_other_cores < 0 disables the guard (never repeats).
  LoadGuard(std::string root, std::vector<pid_t> watched, double max_other_cores, int max_repeats);

  void Begin();
  /// Samples again; returns this attempt's record.
  GuardSample End();
  /// Whether the attempt `attempt` (0-based) that gave `sample` should be repeated.
  bool ShouldRepeat(const GuardSample& sample, int attempt) const;

  void SetWatched(std::vector<pid_t> watched) { watched_ = std::move(watched); }
  double max_other_cores() const { return max_other_cores_; }
  int max_repeats() const { return max_repeats_; }

 private:
  std::string root_;
  std::vector<pid_t> watched_;
  double max_other_cores_;
  int max_repeats_;
  CpuTimes begin_;
};

/// The process listening on TCP `port` (IPv4 or IPv6, any address), found through `root`/net/tcp*
/// and the socket links under `root`/PID/fd; -1 when not found (or not ours to see).
pid_t FindListeningPid(const std::string& root, int port);

}  // namespace crossword::tools::servebench
