// MappedFile: POSIX mmap / read implementation.
#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/error.h"

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
  if (options.use_mmap) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_SHARED, fd.fd, 0);
    if (p == MAP_FAILED)
      Fail("cannot mmap '{}' ({} bytes): {}", path, f.size_, std::strerror(errno));
    f.data_ = static_cast<const std::byte*>(p);
    f.mapped_ = true;
  } else {
    f.owned_.reset(new (std::nothrow) std::byte[f.size_]);
    if (!f.owned_)
      Fail("cannot allocate {} bytes to read '{}' (try without --no-mmap)", f.size_, path);
    uint64_t done = 0;
    while (done < f.size_) {
      ssize_t n = ::pread(fd.fd, f.owned_.get() + done, f.size_ - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        Fail("cannot read '{}' at byte {}: {}", path, done,
             n < 0 ? std::strerror(errno) : "short read");
      done += static_cast<uint64_t>(n);
    }
    f.data_ = f.owned_.get();
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
    owned_ = std::move(other.owned_);
  }
  return *this;
}

MappedFile::~MappedFile() { Reset(); }

void MappedFile::Reset() {
  if (data_ && locked_) ::munlock(data_, size_);
  if (data_ && mapped_) ::munmap(const_cast<std::byte*>(data_), size_);
  owned_.reset();
  data_ = nullptr;
  size_ = 0;
  mapped_ = locked_ = false;
}

}  // namespace crossword
