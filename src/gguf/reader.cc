// GGUF reader: parses and validates a mapped file into a gguf::File. Every length and count is
// checked against the bytes left before it is used, and heap use is charged against a budget
// proportional to the file size, so hostile input fails cleanly instead of crashing or ballooning.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>

#include "base/error.h"
#include "gguf/gguf.h"
#include "gguf/value_storage.h"

namespace crossword::gguf {
namespace {

// Heap bytes the reader may use per byte of input, plus a fixed allowance. Real files need
// about 1-2x (string views for the vocabulary); hostile layouts that would need more fail.
constexpr uint64_t kBudgetPerFileByte = 8;
constexpr uint64_t kBudgetFixed = 1 << 20;
// Smallest encodings, used to bound counts before looping.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;  // key length, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes =
    8 + 4 + 8 + 4 + 8;                            // name len, n_dims, 1 dim, type, offset
constexpr uint64_t kMinNestedArrayBytes = 4 + 8;  // element type, count

// Names of ggml types crossword does not decode, for a clearer refusal.
std::string_view UnsupportedTypeName(uint32_t id) {
  switch (id) {
    case 16:
      return "IQ2_XXS";
    case 17:
      return "IQ2_XS";
    case 18:
      return "IQ3_XXS";
    case 19:
      return "IQ1_S";
    case 20:
      return "IQ4_NL";
    case 21:
      return "IQ3_S";
    case 22:
      return "IQ2_S";
    case 23:
      return "IQ4_XS";
    case 29:
      return "IQ1_M";
    case 34:
      return "TQ1_0";
    case 35:
      return "TQ2_0";
    case 39:
      return "MXFP4";
    default:
      return "";
  }
}

bool IsKnownValueType(uint32_t id) { return id <= static_cast<uint32_t>(ValueType::kFloat64); }

}  // namespace

/// Cursor over the file bytes with error reporting and the allocation budget.
class Reader {
 public:
  Reader(std::span<const std::byte> bytes, const std::string& path)
      : bytes_(bytes), path_(path), budget_(kBudgetFixed + kBudgetPerFileByte * bytes.size()) {}

  void Parse(File* file);

 private:
  uint64_t Left() const { return bytes_.size() - pos_; }

  template <typename... Args>
  [[noreturn]] void Fail(uint64_t offset, fmt::format_string<Args...> f, Args&&... args) const {
    std::string where = context_.empty() ? "" : context_ + ": ";
    throw Error(fmt::format(
        "{}: {}{} (at byte {} of {}); the file is corrupt, truncated or not GGUF", path_, where,
        fmt::format(f, std::forward<Args>(args)...), offset, bytes_.size()));
  }

  void Need(uint64_t n, const char* what) const {
    if (n > Left()) Fail(pos_, "{} needs {} bytes but only {} remain", what, n, Left());
  }

  void Charge(uint64_t bytes, const char* what) {
    if (bytes > budget_) {
      Fail(pos_, "{} would need {} bytes of memory, more than {}x the file size allows", what,
           bytes, kBudgetPerFileByte);
    }
    budget_ -= bytes;
  }

  template <typename T>
  T Read(const char* what) {
    Need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string_view ReadString(const char* what) {
    const uint64_t at = pos_;
    const uint64_t len = Read<uint64_t>(what);
    if (len > Left()) Fail(at, "{} has length {} but only {} bytes remain", what, len, Left());
    std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return s;
  }

  ValueType ReadValueType(const char* what) {
    const uint64_t at = pos_;
    const uint32_t id = Read<uint32_t>(what);
    if (!IsKnownValueType(id)) Fail(at, "{} is {}, not a GGUF value type (0..12)", what, id);
    return static_cast<ValueType>(id);
  }

  Value ReadValue(ValueType type, int depth);
  Value ReadArrayBody(int depth);
  void ReadHeader(File* file, uint64_t* n_tensors, uint64_t* n_kv);
  void ReadMetadata(File* file, uint64_t n_kv);
  void ReadTensorInfos(File* file, uint64_t n_tensors);
  void PlaceTensors(File* file);

  std::span<const std::byte> bytes_;
  const std::string& path_;
  uint64_t pos_ = 0;
  uint64_t budget_;
  std::string context_;  // what is being read, for messages ("metadata key 'x'", "tensor 'y'")
};

Value Reader::ReadValue(ValueType type, int depth) {
  if (IsScalarType(type)) {
    const size_t size = ValueTypeSize(type);
    Need(size, "value");
    const uint64_t bits = internal::LoadScalarBits(type, bytes_.data() + pos_);
    pos_ += size;
    return internal::ValueStorage::Scalar(type, bits);
  }
  if (type == ValueType::kString) {
    Value v;
    v.type_ = ValueType::kString;
    v.str_ = ReadString("string value");
    return v;
  }
  return ReadArrayBody(depth + 1);
}

Value Reader::ReadArrayBody(int depth) {
  if (depth > kMaxArrayDepth) Fail(pos_, "arrays nested deeper than {} levels", kMaxArrayDepth);
  const ValueType elem = ReadValueType("array element type");
  const uint64_t count_at = pos_;
  const uint64_t count = Read<uint64_t>("array length");
  const uint64_t min_size = IsScalarType(elem)           ? ValueTypeSize(elem)
                            : elem == ValueType::kString ? 8
                                                         : kMinNestedArrayBytes;
  if (count > Left() / min_size) {
    Fail(count_at, "array of {} {} elements needs at least {} bytes each but only {} bytes remain",
         count, ValueTypeName(elem), min_size, Left());
  }
  Value v;
  v.type_ = ValueType::kArray;
  v.elem_type_ = elem;
  v.count_ = count;
  if (IsScalarType(elem)) {
    v.raw_ = bytes_.subspan(pos_, count * min_size);
    pos_ += count * min_size;
    return v;
  }
  if (count == 0) return v;
  auto storage = std::make_shared<internal::ValueStorage>();
  Charge(sizeof(internal::ValueStorage) + 64, "array storage");
  if (elem == ValueType::kString) {
    Charge(count * sizeof(std::string_view), "string array");
    storage->strings.reserve(count);
    for (uint64_t i = 0; i < count; ++i) storage->strings.push_back(ReadString("array string"));
  } else {
    Charge(count * sizeof(Value), "nested array");
    storage->items.reserve(count);
    for (uint64_t i = 0; i < count; ++i) storage->items.push_back(ReadArrayBody(depth + 1));
  }
  v.storage_ = std::move(storage);
  return v;
}

void Reader::ReadHeader(File* file, uint64_t* n_tensors, uint64_t* n_kv) {
  if (bytes_.size() < 4) Fail(0, "file has {} bytes, too short for the GGUF magic", bytes_.size());
  const uint32_t magic = Read<uint32_t>("magic");
  if (magic != kMagic) {
    Fail(0, "magic is 0x{:08x} ('{}'), expected 'GGUF'", magic,
         std::string(reinterpret_cast<const char*>(bytes_.data()), 4));
  }
  const uint32_t version = Read<uint32_t>("version");
  if (version != 2 && version != 3) {
    if (__builtin_bswap32(version) == 2 || __builtin_bswap32(version) == 3) {
      Fail(4,
           "big-endian GGUF (version {}) is not supported; convert it on a little-endian machine",
           __builtin_bswap32(version));
    }
    if (version == 1) Fail(4, "GGUF version 1 is not supported; re-convert the model (v2 or v3)");
    Fail(4, "GGUF version {} is not supported (expected 2 or 3)", version);
  }
  file->version_ = version;
  const uint64_t nt_at = pos_;
  *n_tensors = Read<uint64_t>("tensor count");
  const uint64_t nkv_at = pos_;
  *n_kv = Read<uint64_t>("metadata count");
  if (*n_tensors > Left() / kMinTensorInfoBytes) {
    Fail(nt_at, "tensor count {} cannot fit in the {} bytes left ({} bytes per tensor at least)",
         *n_tensors, Left(), kMinTensorInfoBytes);
  }
  if (*n_kv > Left() / kMinKvBytes) {
    Fail(nkv_at, "metadata count {} cannot fit in the {} bytes left ({} bytes per entry at least)",
         *n_kv, Left(), kMinKvBytes);
  }
}

void Reader::ReadMetadata(File* file, uint64_t n_kv) {
  Charge(n_kv * (sizeof(KeyValue) + 64), "metadata table");
  file->kvs_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = pos_;
    context_ = fmt::format("metadata entry #{}", i);
    const std::string_view key = ReadString("key");
    if (key.empty()) Fail(at, "empty key");
    context_ = fmt::format("metadata key '{}'", key.substr(0, 200));
    const ValueType type = ReadValueType("value type");
    Value value = ReadValue(type, 0);
    if (!file->kv_index_.emplace(key, file->kvs_.size()).second) Fail(at, "duplicate key");
    file->kvs_.push_back(KeyValue{key, std::move(value)});
  }
  context_.clear();
  if (const Value* a = file->Find("general.alignment")) {
    context_ = "metadata key 'general.alignment'";
    const auto v = a->AsUint();
    if (!v) Fail(pos_, "has type {}, expected uint32", ValueTypeName(a->type()));
    if (*v == 0 || !std::has_single_bit(*v) || *v > (1u << 30)) {
      Fail(pos_, "is {}, expected a power of two between 1 and 2^30", *v);
    }
    file->alignment_ = *v;
    context_.clear();
  }
}

void Reader::ReadTensorInfos(File* file, uint64_t n_tensors) {
  Charge(n_tensors * (sizeof(TensorInfo) + 64), "tensor table");
  file->tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t at = pos_;
    context_ = fmt::format("tensor #{}", i);
    const std::string_view name = ReadString("tensor name");
    if (name.empty()) Fail(at, "empty tensor name");
    Charge(name.size(), "tensor name");
    TensorInfo t;
    t.name = std::string(name);
    context_ = fmt::format("tensor '{}'", name.substr(0, 200));
    const uint64_t dims_at = pos_;
    const uint32_t n_dims = Read<uint32_t>("n_dims");
    if (n_dims < 1 || n_dims > kMaxDims)
      Fail(dims_at, "n_dims is {}, expected 1..{}", n_dims, kMaxDims);
    t.n_dims = static_cast<int>(n_dims);
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne_at = pos_;
      const int64_t ne = Read<int64_t>("dimension");
      if (ne < 0) Fail(ne_at, "ne[{}] is {}, expected >= 0", d, ne);
      if (__builtin_mul_overflow(n_elements, ne, &n_elements)) {
        Fail(ne_at, "element count overflows at ne[{}] = {}", d, ne);
      }
      t.ne[d] = ne;
    }
    // The row count too: with ne[0] = 0 the element count is 0 whatever the other dims, and
    // TensorInfo::n_rows() would overflow (found by gguf_reader_fuzzer under UBSan).
    if (int64_t rows = 1; __builtin_mul_overflow(t.ne[1], t.ne[2], &rows) ||
                          __builtin_mul_overflow(rows, t.ne[3], &rows)) {
      Fail(dims_at, "row count overflows ({} x {} x {})", t.ne[1], t.ne[2], t.ne[3]);
    }
    const uint64_t type_at = pos_;
    const uint32_t type_id = Read<uint32_t>("tensor type");
    const auto traits = FindTypeTraits(type_id);
    if (!traits) {
      const std::string_view known = UnsupportedTypeName(type_id);
      if (!known.empty())
        Fail(type_at, "type {} ({}) is not supported by crossword", type_id, known);
      Fail(type_at, "type id {} is not a known GGML tensor type", type_id);
    }
    t.type = traits->type;
    if (t.ne[0] % traits->block_size != 0) {
      Fail(type_at, "ne[0] = {} is not a multiple of the {} block size {}", t.ne[0], traits->name,
           traits->block_size);
    }
    const uint64_t row_bytes = *RowBytes(t.type, t.ne[0]);
    if (__builtin_mul_overflow(row_bytes, static_cast<uint64_t>(t.n_rows()), &t.nbytes)) {
      Fail(type_at, "byte size overflows ({} rows of {} bytes)", t.n_rows(), row_bytes);
    }
    t.offset = Read<uint64_t>("tensor offset");
    file->tensors_.push_back(std::move(t));
  }
  context_.clear();
  // Index after the vector is complete: the keys view names owned by the TensorInfos.
  for (size_t i = 0; i < file->tensors_.size(); ++i) {
    const std::string& name = file->tensors_[i].name;
    if (!file->tensor_index_.emplace(name, i).second) {
      context_ = fmt::format("tensor '{}'", name.substr(0, 200));
      Fail(pos_, "duplicate tensor name (tensor #{} has the same name)", i);
    }
  }
}

void Reader::PlaceTensors(File* file) {
  const uint64_t align = file->alignment_;
  const uint64_t end_of_infos = pos_;
  file->data_offset_ = (end_of_infos + align - 1) / align * align;
  const uint64_t size = bytes_.size();
  const uint64_t data_size = file->data_offset_ <= size ? size - file->data_offset_ : 0;
  std::vector<size_t> order(file->tensors_.size());
  std::iota(order.begin(), order.end(), 0);
  for (TensorInfo& t : file->tensors_) {
    context_ = fmt::format("tensor '{}'", t.name.substr(0, 200));
    if (t.offset % align != 0) {
      Fail(file->data_offset_, "data offset {} is not a multiple of the alignment {}", t.offset,
           align);
    }
    if (t.nbytes > 0 &&
        (file->data_offset_ > size || t.offset > data_size || t.nbytes > data_size - t.offset)) {
      Fail(file->data_offset_ + t.offset,
           "data [{}, {}) of {} bytes ({} {}) runs past the end of the data section ({} bytes, "
           "starting at byte {})",
           t.offset, t.offset + t.nbytes, t.nbytes, TypeName(t.type), t.n_elements(), data_size,
           file->data_offset_);
    }
    t.data = t.nbytes > 0 ? bytes_.data() + file->data_offset_ + t.offset : nullptr;
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return file->tensors_[a].offset < file->tensors_[b].offset;
  });
  for (size_t i = 1; i < order.size(); ++i) {
    const TensorInfo& prev = file->tensors_[order[i - 1]];
    const TensorInfo& cur = file->tensors_[order[i]];
    if (prev.nbytes > 0 && cur.nbytes > 0 && cur.offset < prev.offset + prev.nbytes) {
      context_ = fmt::format("tensor '{}'", cur.name.substr(0, 200));
      Fail(file->data_offset_ + cur.offset, "data at offset {} overlaps tensor '{}' ([{}, {}))",
           cur.offset, prev.name.substr(0, 200), prev.offset, prev.offset + prev.nbytes);
    }
  }
  context_.clear();
}

void Reader::Parse(File* file) {
  uint64_t n_tensors = 0, n_kv = 0;
  ReadHeader(file, &n_tensors, &n_kv);
  ReadMetadata(file, n_kv);
  ReadTensorInfos(file, n_tensors);
  PlaceTensors(file);
}

// ---- File ---------------------------------------------------------------------------------

File::File() = default;
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

File File::Open(const std::string& path, const MapOptions& options) {
  File f;
  f.path_ = path;
  f.mapping_ = std::make_unique<MappedFile>(MappedFile::Open(path, options));
  f.bytes_ = std::span<const std::byte>(f.mapping_->data(), f.mapping_->size());
  Reader(f.bytes_, f.path_).Parse(&f);
  return f;
}

File File::Parse(std::span<const std::byte> bytes) {
  File f;
  f.path_ = "<memory>";
  f.bytes_ = bytes;
  Reader(f.bytes_, f.path_).Parse(&f);
  return f;
}

const Value* File::Find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const TensorInfo* File::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

template <typename T>
std::optional<T> Typed(const File& f, std::string_view key, std::optional<T> (Value::*get)() const,
                       const char* expected) {
  const Value* v = f.Find(key);
  if (!v) return std::nullopt;
  auto r = (v->*get)();
  if (!r) {
    Fail("{}: metadata key '{}' has type {} (value {}), expected {}", f.path(), key,
         ValueTypeName(v->type()), v->ToString(4, 40), expected);
  }
  return r;
}

template <typename T>
T Required(const File& f, std::string_view key, std::optional<T> value) {
  if (!value) Fail("{}: key '{}' not found in the GGUF metadata", f.path(), key);
  return *value;
}

}  // namespace

std::optional<std::string_view> File::GetString(std::string_view key) const {
  return Typed<std::string_view>(*this, key, &Value::AsString, "string");
}
std::optional<uint64_t> File::GetUint(std::string_view key) const {
  return Typed<uint64_t>(*this, key, &Value::AsUint, "a non-negative integer");
}
std::optional<int64_t> File::GetInt(std::string_view key) const {
  return Typed<int64_t>(*this, key, &Value::AsInt, "an integer");
}
std::optional<double> File::GetFloat(std::string_view key) const {
  return Typed<double>(*this, key, &Value::AsFloat, "a number");
}
std::optional<bool> File::GetBool(std::string_view key) const {
  return Typed<bool>(*this, key, &Value::AsBool, "bool");
}
std::string_view File::RequireString(std::string_view key) const {
  return Required(*this, key, GetString(key));
}
uint64_t File::RequireUint(std::string_view key) const {
  return Required(*this, key, GetUint(key));
}
int64_t File::RequireInt(std::string_view key) const { return Required(*this, key, GetInt(key)); }
double File::RequireFloat(std::string_view key) const {
  return Required(*this, key, GetFloat(key));
}
bool File::RequireBool(std::string_view key) const { return Required(*this, key, GetBool(key)); }

std::string_view File::architecture() const {
  const Value* v = Find("general.architecture");
  if (!v) return {};
  return v->AsString().value_or(std::string_view());
}

}  // namespace crossword::gguf
