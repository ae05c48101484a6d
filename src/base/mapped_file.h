// Read-only view of a whole file: mmap by default, or read into RAM; optional mlock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace crossword {

struct MapOptions {
  bool use_mmap = true;  ///< false: read the whole file into an owned heap buffer (`--no-mmap`).
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

 private:
  void Reset();
  std::string path_;
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;
  bool locked_ = false;
  std::unique_ptr<std::byte[]> owned_;
};

}  // namespace crossword
