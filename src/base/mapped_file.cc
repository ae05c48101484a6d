// MappedFile: POSIX mmap / read implementation.
#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "base/error.h"
#include "base/memory_limit.h"

namespace crossword {

namespace {
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

MappedFile MappedFile::Open(const std::string& path, const MapOptions& options) {
  MappedFile f;
  f.path_ = path;
  Fd fd;
  fd.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd.fd < 0) Fail("cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) Fail("cannot stat '{}': {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) Fail("'{}' is not a regular file", path);
  f.size_ = static_cast<uint64_t>(st.st_size);
  if (f.size_ == 0) return f;
  // --no-mmap and --mlock hold the whole file in memory that cannot be reclaimed: one that leaves
  // less than an eighth of the memory this process may use (a container's limit) for the rest of
  // it (KV caches, activations, the binary) would get the kernel's OOM kill part way through the
  // load or the first requests, so it is refused here with the way out. (2.6 GB read under a
  // 2.5 GiB cgroup: killed before the load finished.)
  if (!options.use_mmap || options.lock) {
    const MemoryLimit limit = ProcessMemoryLimit();
    if (limit.bytes != 0 && f.size_ > HoldableBytes(limit.bytes)) {
      Fail(
          "'{}' ({:.1f} MiB) does not fit the {:.1f} MiB this process may use ({}) with an eighth "
          "left for the rest of it: {}",
          path, f.size_ / 1048576.0, limit.bytes / 1048576.0, limit.source,
          options.use_mmap ? "--mlock pins every page of it; drop --mlock"
                           : "--no-mmap reads the whole file into memory; map it instead (without "
                             "--no-mmap)");
    }
  }
  if (options.use_mmap) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_SHARED, fd.fd, 0);
    if (p == MAP_FAILED)
      Fail("cannot mmap '{}' ({} bytes): {}", path, f.size_, std::strerror(errno));
    f.data_ = static_cast<const std::byte*>(p);
    f.mapped_ = true;
  } else {
    // Anonymous memory in 2 MiB transparent huge pages where the kernel has them (Debian's THP
    // mode is `madvise`): a 20 GB model read through 4 KiB pages pays a page walk per 4 KiB of
    // weights streamed, and its page tables (~40 MB) do not stay in the caches.
    void* p = ::mmap(nullptr, f.size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      Fail("cannot allocate {} bytes to read '{}' (try without --no-mmap): {}", f.size_, path,
           std::strerror(errno));
    }
    f.data_ = static_cast<const std::byte*>(p);
    f.anonymous_ = true;
    (void)::madvise(p, f.size_, MADV_HUGEPAGE);  // advice only: without THP, 4 KiB pages
    auto* dst = static_cast<std::byte*>(p);
    // In pieces, each piece's cached file pages released once copied, so that the machine holds
    // one copy of the model rather than the page cache's beside ours (which on a machine barely
    // larger than the model would push out the pages not yet read).
    constexpr uint64_t kPiece = uint64_t{64} << 20;
    uint64_t done = 0;
    while (done < f.size_) {
      const uint64_t want = std::min(kPiece, f.size_ - done);
      ssize_t n = ::pread(fd.fd, dst + done, want, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        Fail("cannot read '{}' at byte {}: {}", path, done,
             n < 0 ? std::strerror(errno) : "short read");
      (void)::posix_fadvise(fd.fd, static_cast<off_t>(done), n, POSIX_FADV_DONTNEED);
      done += static_cast<uint64_t>(n);
    }
    (void)::mprotect(p, f.size_, PROT_READ);
  }
  if (options.lock) {
    if (::mlock(f.data_, f.size_) != 0) {
      Fail(
          "cannot mlock {} bytes of '{}': {} (raise RLIMIT_MEMLOCK with 'ulimit -l', or drop "
          "--mlock)",
          f.size_, path, std::strerror(errno));
    }
    f.locked_ = true;
  }
  return f;
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, false);
    locked_ = std::exchange(other.locked_, false);
    anonymous_ = std::exchange(other.anonymous_, false);
  }
  return *this;
}

MappedFile::~MappedFile() { Reset(); }

void MappedFile::Reset() {
  if (data_ && locked_) ::munlock(data_, size_);
  if (data_ && (mapped_ || anonymous_)) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
  mapped_ = locked_ = anonymous_ = false;
}

}  // namespace crossword
