// Read-only view of a whole file: mmap by default, or read into RAM; optional mlock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace crossword {

struct MapOptions {
  /// false (`--no-mmap`): read the whole file into anonymous memory of this process (in 2 MiB
  /// transparent huge pages where the kernel grants them), releasing the file's cached pages as
  /// they are copied.
  bool use_mmap = true;
  bool lock = false;  ///< mlock the pages (`--mlock`); failure is an Error naming RLIMIT_MEMLOCK.
};

/// A file's bytes, valid for the lifetime of the object. Move-only.
/// Throws crossword::Error if the file cannot be opened, sized, mapped, read or locked.
class MappedFile {
 public:
  static MappedFile Open(const std::string& path, const MapOptions& options = {});
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  bool is_mmap() const { return mapped_; }
  bool is_locked() const { return locked_; }

 private:
  void Reset();
  std::string path_;
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;
  bool locked_ = false;
  bool anonymous_ = false;  // read into an anonymous mapping (--no-mmap)
};

}  // namespace crossword
