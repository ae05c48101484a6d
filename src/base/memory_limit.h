// The memory this process may use: physical memory, or less where a control group limits it
// (a container's `--memory`, a Kubernetes pod's `resources.limits.memory`). Memory sized from
// physical memory alone overshoots a container's limit, and the kernel then kills the process.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace crossword {

/// A memory limit and where it comes from.
struct MemoryLimit {
  size_t bytes = 0;     ///< 0: unknown
  bool cgroup = false;  ///< a cgroup's limit, below physical memory
  std::string source;  ///< "physical memory" or the limiting file, e.g. "/sys/fs/cgroup/memory.max"
};

/// The smallest cgroup memory limit that applies to a process, 0 when none does.
/// `proc_self_cgroup`: the text of /proc/<pid>/cgroup ("0::/path" for cgroup v2, "N:memory:/path"
/// or "N:...,memory,...:/path" for a v1 memory controller). `cgroup_root`: where the hierarchies
/// are mounted (/sys/fs/cgroup). v2 reads `memory.max` under `cgroup_root` or its `unified`
/// folder (the hybrid layout), v1 `memory.limit_in_bytes` under `cgroup_root/memory`; each from
/// the process's cgroup up to the hierarchy's root, since a parent's limit binds its children
/// (inside a container the path may not exist below the mount, which then is the container's own
/// cgroup: only the existing folders are read). "max", and v1's near-2^63 "no limit" values, mean
/// none. Unreadable or malformed files are skipped (no error: the caller falls back to physical
/// memory). `source` gets the file that gave the limit.
size_t CgroupMemoryLimit(std::string_view proc_self_cgroup,
                         const std::filesystem::path& cgroup_root, std::string* source = nullptr);

/// min(physical memory, this process's cgroup limit) from /proc/self/cgroup and /sys/fs/cgroup.
MemoryLimit ProcessMemoryLimit();

}  // namespace crossword
