// GGUF v3 streaming writer: header, metadata and tensor infos first, then tensor data in declared
// order with zero padding to the alignment. Tensor bytes pass through a small buffer (or the
// kernel, for CopyTensorData), so files of any size are written in constant memory.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "base/error.h"
#include "gguf/gguf.h"
#include "gguf/value_storage.h"

namespace crossword::gguf {
namespace {

constexpr size_t kBufferSize = 4 << 20;

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Bytes the encoder below writes for an array body (element type, count, elements).
uint64_t EncodedArraySize(const Value& v) {
  uint64_t s = 4 + 8;
  if (IsScalarType(v.array_type())) return s + v.RawArrayBytes().size();
  if (v.array_type() == ValueType::kString) {
    const auto strings = *v.StringArray();
    for (std::string_view e : strings) s += 8 + e.size();
    return s;
  }
  for (const Value& item : v.NestedItems()) s += EncodedArraySize(item);
  return s;
}

// Bytes of a value's payload (after its type id).
uint64_t EncodedValueSize(const Value& v) {
  if (IsScalarType(v.type())) return ValueTypeSize(v.type());
  if (v.type() == ValueType::kString) return 8 + v.AsString()->size();
  return EncodedArraySize(v);
}

}  // namespace

Writer::Writer(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) Fail("cannot create '{}': {}", path, std::strerror(errno));
  buffer_.reserve(kBufferSize);
}

Writer::~Writer() {
  if (fd_ >= 0) ::close(fd_);
}

void Writer::AddKeyValue(std::string key, Value value) {
  Check(!header_written_, "{}: metadata key '{}' added after the header was written", path_, key);
  Check(!key.empty(), "{}: empty metadata key", path_);
  for (const auto& kv : kvs_) {
    Check(kv.first != key, "{}: duplicate metadata key '{}'", path_, key);
  }
  if (key == "general.alignment") {
    const auto a = value.AsUint();
    Check(value.type() == ValueType::kUint32 && a && *a > 0 && (*a & (*a - 1)) == 0,
          "{}: general.alignment must be a uint32 power of two, got {} {}", path_,
          ValueTypeName(value.type()), value.ToString());
    alignment_ = *a;
  }
  kvs_.emplace_back(std::move(key), std::move(value));
}

uint64_t Writer::AddTensor(std::string name, GgmlType type, std::span<const int64_t> ne) {
  Check(!header_written_, "{}: tensor '{}' added after the header was written", path_, name);
  Check(!name.empty(), "{}: empty tensor name", path_);
  Check(!ne.empty() && ne.size() <= kMaxDims, "{}: tensor '{}' has {} dims, expected 1..{}", path_,
        name, ne.size(), kMaxDims);
  for (const auto& t : tensors_) Check(t.name != name, "{}: duplicate tensor '{}'", path_, name);
  int64_t rows = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    Check(ne[d] >= 0, "{}: tensor '{}' ne[{}] = {} is negative", path_, name, d, ne[d]);
    if (d > 0)
      Check(!__builtin_mul_overflow(rows, ne[d], &rows), "{}: tensor '{}' is too large", path_,
            name);
  }
  const auto row_bytes = RowBytes(type, ne[0]);
  Check(row_bytes.has_value(),
        "{}: tensor '{}' row length {} is not a multiple of the {} block size {}", path_, name,
        ne[0], TypeName(type), GetTypeTraits(type).block_size);
  uint64_t nbytes;
  Check(!__builtin_mul_overflow(*row_bytes, static_cast<uint64_t>(rows), &nbytes),
        "{}: tensor '{}' is too large", path_, name);
  tensors_.push_back(
      PlannedTensor{std::move(name), type, std::vector<int64_t>(ne.begin(), ne.end()), 0, nbytes});
  return nbytes;
}

uint64_t Writer::PlannedDataOffset() const {
  uint64_t size = 4 + 4 + 8 + 8;
  for (const auto& [key, value] : kvs_) size += 8 + key.size() + 4 + EncodedValueSize(value);
  for (const auto& t : tensors_) size += 8 + t.name.size() + 4 + 8 * t.ne.size() + 4 + 8;
  return AlignUp(size, alignment_);
}

uint64_t Writer::PlannedFileSize() const {
  uint64_t end = 0;
  for (const auto& t : tensors_) end = AlignUp(end, alignment_) + t.nbytes;
  return PlannedDataOffset() + AlignUp(end, alignment_);
}

void Writer::WriteAll(const std::byte* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      Fail("cannot write '{}' at byte {}: {} (disk full?)", path_, written_,
           w < 0 ? std::strerror(errno) : "no progress");
    }
    data += w;
    n -= static_cast<size_t>(w);
    written_ += static_cast<uint64_t>(w);
  }
}

void Writer::Flush() {
  if (buffer_.empty()) return;
  WriteAll(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void Writer::Append(const void* data, size_t n) {
  const auto* p = static_cast<const std::byte*>(data);
  if (buffer_.size() + n > kBufferSize) Flush();
  if (n >= kBufferSize) {
    WriteAll(p, n);
    return;
  }
  buffer_.insert(buffer_.end(), p, p + n);
}

void Writer::PadTo(uint64_t multiple) {
  static constexpr std::byte kZeros[64] = {};
  uint64_t pos = written_ + buffer_.size();
  uint64_t pad = AlignUp(pos, multiple) - pos;
  while (pad > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof(kZeros)));
    Append(kZeros, n);
    pad -= n;
  }
}

namespace {

template <typename T>
void Put(std::vector<std::byte>* out, T v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out->insert(out->end(), p, p + sizeof(T));
}

void PutString(std::vector<std::byte>* out, std::string_view s) {
  Put<uint64_t>(out, s.size());
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  out->insert(out->end(), p, p + s.size());
}

void PutArrayBody(std::vector<std::byte>* out, const Value& v) {
  Put<uint32_t>(out, static_cast<uint32_t>(v.array_type()));
  Put<uint64_t>(out, v.array_size());
  if (IsScalarType(v.array_type())) {
    auto raw = v.RawArrayBytes();
    out->insert(out->end(), raw.begin(), raw.end());
  } else if (v.array_type() == ValueType::kString) {
    const auto strings = *v.StringArray();
    for (std::string_view s : strings) PutString(out, s);
  } else {
    for (const Value& item : v.NestedItems()) PutArrayBody(out, item);
  }
}

void PutValue(std::vector<std::byte>* out, const Value& v) {
  Put<uint32_t>(out, static_cast<uint32_t>(v.type()));
  if (IsScalarType(v.type())) {
    const uint64_t bits = internal::ValueStorage::Bits(v);
    const auto* p = reinterpret_cast<const std::byte*>(&bits);  // little-endian host
    out->insert(out->end(), p, p + ValueTypeSize(v.type()));
  } else if (v.type() == ValueType::kString) {
    PutString(out, *v.AsString());
  } else {
    PutArrayBody(out, v);
  }
}

}  // namespace

void Writer::WriteHeader() {
  if (header_written_) return;
  Check(!finished_, "{}: header written after Finish", path_);
  uint64_t end = 0;
  for (auto& t : tensors_) {
    t.offset = AlignUp(end, alignment_);
    end = t.offset + t.nbytes;
  }
  data_size_ = end;
  std::vector<std::byte> header;
  Put<uint32_t>(&header, kMagic);
  Put<uint32_t>(&header, 3);
  Put<uint64_t>(&header, tensors_.size());
  Put<uint64_t>(&header, kvs_.size());
  for (const auto& [key, value] : kvs_) {
    PutString(&header, key);
    PutValue(&header, value);
    // Flush big metadata (vocabularies) in pieces to bound the header buffer.
    if (header.size() > kBufferSize) {
      Append(header.data(), header.size());
      header.clear();
    }
  }
  for (const auto& t : tensors_) {
    PutString(&header, t.name);
    Put<uint32_t>(&header, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) Put<int64_t>(&header, d);
    Put<uint32_t>(&header, static_cast<uint32_t>(t.type));
    Put<uint64_t>(&header, t.offset);
  }
  Append(header.data(), header.size());
  PadTo(alignment_);
  header_written_ = true;
  current_ = 0;
  current_done_ = 0;
  while (current_ < tensors_.size() && tensors_[current_].nbytes == 0) ++current_;
}

void Writer::Advance(uint64_t n) {
  current_done_ += n;
  if (current_done_ < tensors_[current_].nbytes) return;
  PadTo(alignment_);
  current_done_ = 0;
  ++current_;
  while (current_ < tensors_.size() && tensors_[current_].nbytes == 0) ++current_;
}

void Writer::WriteTensorData(std::span<const std::byte> bytes) {
  WriteHeader();
  while (!bytes.empty()) {
    Check(current_ < tensors_.size(), "{}: {} bytes of tensor data beyond the last declared tensor",
          path_, bytes.size());
    const uint64_t left = tensors_[current_].nbytes - current_done_;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, bytes.size()));
    Append(bytes.data(), n);
    bytes = bytes.subspan(n);
    Advance(n);
  }
}

void Writer::CopyTensorData(int fd, uint64_t offset, uint64_t nbytes) {
  WriteHeader();
  std::vector<std::byte> fallback;
  bool use_copy = true;
  while (nbytes > 0) {
    Check(current_ < tensors_.size(), "{}: {} bytes of tensor data beyond the last declared tensor",
          path_, nbytes);
    const uint64_t n = std::min(tensors_[current_].nbytes - current_done_, nbytes);
    Flush();
    uint64_t done = 0;
    while (done < n) {
      if (use_copy) {
        loff_t in = static_cast<loff_t>(offset + done);
        const ssize_t c = ::copy_file_range(fd, &in, fd_, nullptr, n - done, 0);
        if (c > 0) {
          done += static_cast<uint64_t>(c);
          written_ += static_cast<uint64_t>(c);
          continue;
        }
        if (c == 0)
          Fail("cannot copy into '{}': the source ends before byte {}", path_, offset + done);
        if (errno == EINTR) continue;
        if (errno != EXDEV && errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP) {
          Fail("cannot copy {} bytes into '{}' at byte {}: {}", n - done, path_, written_,
               std::strerror(errno));
        }
        use_copy = false;  // not supported between these files: copy through user space
        fallback.resize(kBufferSize);
        continue;
      }
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n - done, fallback.size()));
      const ssize_t r = ::pread(fd, fallback.data(), chunk, static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        Fail("cannot read the source of '{}' at byte {}: {}", path_, offset + done,
             r < 0 ? std::strerror(errno) : "end of file");
      WriteAll(fallback.data(), static_cast<size_t>(r));
      done += static_cast<uint64_t>(r);
    }
    offset += n;
    nbytes -= n;
    Advance(n);
  }
}

std::string_view Writer::current_tensor() const {
  if (!header_written_)
    return tensors_.empty() ? std::string_view() : std::string_view(tensors_[0].name);
  return current_ < tensors_.size() ? std::string_view(tensors_[current_].name)
                                    : std::string_view();
}

void Writer::Finish() {
  Check(!finished_, "{}: Finish called twice", path_);
  WriteHeader();
  if (current_ < tensors_.size()) {
    Fail("{}: tensor '{}' has {} of {} bytes written; every declared tensor needs all its data",
         path_, tensors_[current_].name, current_done_, tensors_[current_].nbytes);
  }
  Flush();
  if (::fsync(fd_) != 0) Fail("cannot fsync '{}': {}", path_, std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) Fail("cannot close '{}': {}", path_, std::strerror(errno));
  finished_ = true;
}

void Writer::FinishSparse() {
  Check(!finished_ && current_ == 0 && current_done_ == 0,
        "{}: FinishSparse after tensor data or Finish", path_);
  WriteHeader();
  Flush();
  if (::ftruncate(fd_, static_cast<off_t>(PlannedFileSize())) != 0)
    Fail("cannot extend '{}' to {} bytes: {}", path_, PlannedFileSize(), std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) Fail("cannot close '{}': {}", path_, std::strerror(errno));
  finished_ = true;
}

}  // namespace crossword::gguf
