// The memory this process may use: physical memory, or less where a control group limits it
// (a container's `--memory`, a Kubernetes pod's `resources.limits.memory`, a systemd unit's
// MemoryMax / MemoryHigh). Memory sized from physical memory alone overshoots a container's
// limit, and the kernel then kills the process.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace crossword {

/// A memory limit and where it comes from.
struct MemoryLimit {
  size_t bytes = 0;     ///< 0: unknown
  bool cgroup = false;  ///< a cgroup's limit, below physical memory (or physical memory unknown)
  std::string source;  ///< "physical memory" or the limiting file, e.g. "/sys/fs/cgroup/memory.max"
};

/// The smallest cgroup memory limit that applies to a process, 0 when none is found.
/// `proc_self_cgroup`: the text of /proc/<pid>/cgroup ("0::/path" for cgroup v2, "N:memory:/path"
/// or "N:cpu,memory:/path" for a v1 memory controller); `proc_self_mountinfo`: the text of
/// /proc/<pid>/mountinfo, which says where each hierarchy is mounted and which of its folders is
/// the mount's root (a container sees its own cgroup as the root of its mount).
///
/// v2: `memory.max` and `memory.high` (above memory.high the kernel throttles the process, which
/// without swap stalls it) of the process's cgroup and every parent visible under the mount. v1:
/// `memory.limit_in_bytes` of the same folders, and the process's own `memory.stat`
/// `hierarchical_memory_limit`, which the kernel computes over every ancestor, those outside
/// the mount included. Not seen: a v2 ancestor above a cgroup namespace's root (the kernel shows
/// no folder of it). "max" and v1's near-2^63 "no limit" values mean none; unreadable or
/// malformed files are skipped (the caller falls back to physical memory). `source` gets the file
/// that gave the limit.
size_t CgroupMemoryLimit(std::string_view proc_self_cgroup, std::string_view proc_self_mountinfo,
                         std::string* source = nullptr);

/// min(physical memory, this process's cgroup limit) from /proc/self/cgroup and
/// /proc/self/mountinfo.
MemoryLimit ProcessMemoryLimit();

/// The most a process under `limit_bytes` may hold in memory that cannot be reclaimed (a model
/// read with --no-mmap, or locked with --mlock): the limit less an eighth for the rest of the
/// process (KV caches, activations, the binary). 0 for an unknown limit (0).
inline size_t HoldableBytes(size_t limit_bytes) { return limit_bytes - limit_bytes / 8; }

}  // namespace crossword
