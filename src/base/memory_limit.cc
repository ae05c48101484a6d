#include "base/memory_limit.h"

#include <unistd.h>

#include <charconv>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

namespace crossword {
namespace {

namespace fs = std::filesystem;

// cgroup v1 reports "no limit" as the largest page-aligned signed 64-bit value (9223372036854771712
// with 4 KiB pages); anything from 2^62 up is treated as none.
constexpr uint64_t kV1NoLimit = uint64_t{1} << 62;

// The first line of a small control file, or "" when it cannot be read.
std::string FirstLine(const fs::path& p) {
  std::ifstream f(p);
  std::string line;
  if (f) std::getline(f, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

// A limit file's value: 0 for "max", unreadable, malformed or v1's "no limit".
uint64_t LimitValue(const fs::path& p) {
  const std::string s = FirstLine(p);
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v >= kV1NoLimit) return 0;
  return v;
}

// The smallest limit in `file` from `root`/`path` up to `root` (the folders that exist).
void MinUpTheTree(const fs::path& root, std::string_view path, const char* file, uint64_t* best,
                  std::string* source) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  // Only the folders under root: the path comes from the kernel, but ".." in it must not walk out.
  fs::path rel = fs::path(std::string(path)).relative_path().lexically_normal();
  if (!rel.empty() && *rel.begin() == "..") rel.clear();
  for (;;) {
    const fs::path dir = rel.empty() || rel == "." ? root : root / rel;
    const fs::path f = dir / file;
    if (fs::exists(f, ec)) {
      const uint64_t v = LimitValue(f);
      if (v != 0 && (*best == 0 || v < *best)) {
        *best = v;
        if (source) *source = f.string();
      }
    }
    if (rel.empty() || rel == ".") break;
    rel = rel.parent_path();
  }
}

}  // namespace

size_t CgroupMemoryLimit(std::string_view proc_self_cgroup, const fs::path& cgroup_root,
                         std::string* source) {
  uint64_t best = 0;
  // At most a few dozen lines; bounded so a strange file cannot make this loop long.
  size_t lines = 0;
  while (!proc_self_cgroup.empty() && lines++ < 256) {
    const size_t nl = proc_self_cgroup.find('\n');
    const std::string_view line = proc_self_cgroup.substr(0, nl);
    proc_self_cgroup = nl == std::string_view::npos ? "" : proc_self_cgroup.substr(nl + 1);
    // hierarchy-ID:controllers:path (the path may itself hold ':').
    const size_t a = line.find(':');
    if (a == std::string_view::npos) continue;
    const size_t b = line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1);
    const std::string_view path = line.substr(b + 1);
    if (id == "0" && controllers.empty()) {
      MinUpTheTree(cgroup_root, path, "memory.max", &best, source);
      MinUpTheTree(cgroup_root / "unified", path, "memory.max", &best, source);
      continue;
    }
    std::string_view rest = controllers;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      if (rest.substr(0, comma) == "memory") {
        MinUpTheTree(cgroup_root / "memory", path, "memory.limit_in_bytes", &best, source);
        break;
      }
      rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
    }
  }
  return static_cast<size_t>(best);
}

MemoryLimit ProcessMemoryLimit() {
  MemoryLimit m;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) {
    m.bytes = static_cast<size_t>(pages) * static_cast<size_t>(page);
    m.source = "physical memory";
  }
  std::ifstream f("/proc/self/cgroup");
  if (!f) return m;
  std::ostringstream text;
  text << f.rdbuf();
  std::string source;
  const size_t cg = CgroupMemoryLimit(text.str().substr(0, 1 << 16), "/sys/fs/cgroup", &source);
  if (cg != 0 && (m.bytes == 0 || cg < m.bytes)) {
    m.bytes = cg;
    m.cgroup = true;
    m.source = source;
  }
  return m;
}

}  // namespace crossword
