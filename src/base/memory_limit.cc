// The process's memory limit: physical memory and the cgroup limits found through
// /proc/self/cgroup and /proc/self/mountinfo (proc(5), cgroups(7), the kernel's cgroup-v1
// memory.rst and cgroup-v2.rst).
#include "base/memory_limit.h"

#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

namespace crossword {
namespace {

namespace fs = std::filesystem;

// cgroup v1 reports "no limit" as the largest page-aligned signed 64-bit value (9223372036854771712
// with 4 KiB pages); anything from 2^62 up is treated as none.
constexpr uint64_t kNoLimit = uint64_t{1} << 62;
// Bounds on the kernel's text, so a strange file cannot make these loops long.
constexpr size_t kMaxLines = 4096, kMaxText = size_t{1} << 20;

// Up to `max` bytes of a file, "" when it cannot be read.
std::string ReadText(const fs::path& p, size_t max = 4096) {
  std::ifstream f(p, std::ios::binary);
  std::string s(max, '\0');
  if (!f) return "";
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(f.gcount()));
  return s;
}

// A decimal value, 0 for "max", "0", malformed text or v1's "no limit" (each means: no limit
// from this file).
uint64_t LimitOf(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v >= kNoLimit) return 0;
  return v;
}

// The lines of `text`, at most kMaxLines.
std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty() && out.size() < kMaxLines) {
    const size_t nl = text.find('\n');
    out.push_back(text.substr(0, nl));
    text = nl == std::string_view::npos ? "" : text.substr(nl + 1);
  }
  return out;
}

// Space-separated fields of a line.
std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    const size_t j = line.find(' ', i);
    if (i < line.size()) out.push_back(line.substr(i, j == std::string_view::npos ? j : j - i));
    if (j == std::string_view::npos) break;
    i = j;
  }
  return out;
}

bool IsOctal(char c) { return c >= '0' && c <= '7'; }

// mountinfo's octal escapes (\040 space, \011 tab, \012 newline, \134 backslash).
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && IsOctal(s[i + 1]) && IsOctal(s[i + 2]) &&
        IsOctal(s[i + 3])) {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

bool HasItem(std::string_view list, std::string_view item) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    if (list.substr(0, comma) == item) return true;
    list = comma == std::string_view::npos ? "" : list.substr(comma + 1);
  }
  return false;
}

// A cgroup hierarchy's mount: where it is and which of its folders is the mount's root.
struct Mount {
  std::string root, point;
  bool v2 = false;
};

std::vector<Mount> CgroupMounts(std::string_view mountinfo) {
  std::vector<Mount> out;
  for (std::string_view line : Lines(mountinfo)) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    const std::vector<std::string_view> f = Fields(line);
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 5 || dash + 1 >= f.size()) continue;
    const std::string_view type = f[dash + 1];
    const std::string_view super = dash + 3 < f.size() ? f[dash + 3] : "";
    const bool v2 = type == "cgroup2";
    if (!v2 && !(type == "cgroup" && HasItem(super, "memory"))) continue;
    out.push_back({Unescape(f[3]), Unescape(f[4]), v2});
  }
  return out;
}

struct Best {
  uint64_t bytes = 0;
  std::string* source = nullptr;
  void Take(uint64_t v, const std::string& from) {
    if (v == 0 || (bytes != 0 && v >= bytes)) return;
    bytes = v;
    if (source) *source = from;
  }
};

// The limits of `path` (a cgroup path from /proc/self/cgroup) and its parents under `m`.
void ReadLimits(const Mount& m, std::string_view path, Best& best) {
  // The folder of `path` below the mount: its part under the mount's root. A path outside it
  // (no cgroup namespace, a container's own cgroup mounted as the root) is the mount's root.
  fs::path rel;
  const fs::path p = fs::path(std::string(path)).lexically_normal();
  const fs::path r = fs::path(m.root).lexically_normal();
  const fs::path under = p.lexically_relative(r);
  if (!under.empty() && *under.begin() != "..") rel = under;
  if (rel == ".") rel.clear();
  std::error_code ec;
  bool leaf = true;
  for (;;) {
    const fs::path dir = rel.empty() ? fs::path(m.point) : fs::path(m.point) / rel;
    if (fs::is_directory(dir, ec)) {
      if (m.v2) {
        best.Take(LimitOf(ReadText(dir / "memory.max")), (dir / "memory.max").string());
        best.Take(LimitOf(ReadText(dir / "memory.high")), (dir / "memory.high").string());
      } else {
        best.Take(LimitOf(ReadText(dir / "memory.limit_in_bytes")),
                  (dir / "memory.limit_in_bytes").string());
        if (leaf) {  // the kernel's own minimum over every ancestor, those above the mount too
          // Named: a temporary in the range's initializer would die before the loop (C++20).
          const std::string stat = ReadText(dir / "memory.stat", 1 << 16);
          for (std::string_view line : Lines(stat)) {
            constexpr std::string_view kKey = "hierarchical_memory_limit ";
            if (line.starts_with(kKey)) {
              best.Take(LimitOf(line.substr(kKey.size())),
                        (dir / "memory.stat").string() + " hierarchical_memory_limit");
            }
          }
        }
        leaf = false;
      }
    }
    if (rel.empty()) break;
    rel = rel.parent_path();
    if (rel == "/" || rel == ".") rel.clear();
  }
}

}  // namespace

size_t CgroupMemoryLimit(std::string_view proc_self_cgroup, std::string_view proc_self_mountinfo,
                         std::string* source) {
  Best best{.bytes = 0, .source = source};
  const std::vector<Mount> mounts = CgroupMounts(proc_self_mountinfo);
  for (std::string_view line : Lines(proc_self_cgroup)) {
    // hierarchy-ID:controllers:path (the path may itself hold ':').
    const size_t a = line.find(':');
    if (a == std::string_view::npos) continue;
    const size_t b = line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    const std::string_view controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    const bool v2 = line.substr(0, a) == "0" && controllers.empty();
    if (!v2 && !HasItem(controllers, "memory")) continue;
    for (const Mount& m : mounts) {
      if (m.v2 == v2) ReadLimits(m, path, best);
    }
  }
  return static_cast<size_t>(best.bytes);
}

MemoryLimit ProcessMemoryLimit() {
  MemoryLimit m;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) {
    m.bytes = static_cast<size_t>(pages) * static_cast<size_t>(page);
    m.source = "physical memory";
  }
  std::string source;
  const size_t cg = CgroupMemoryLimit(ReadText("/proc/self/cgroup", kMaxText),
                                      ReadText("/proc/self/mountinfo", kMaxText), &source);
  if (cg != 0 && (m.bytes == 0 || cg < m.bytes)) {
    m.bytes = cg;
    m.cgroup = true;
    m.source = source;
  }
  return m;
}

}  // namespace crossword
