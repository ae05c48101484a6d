// GGUF v3 (and v2) reader and streaming writer. The reader maps the file, validates every
// count, length and offset before use, and hands out zero-copy views of metadata and tensors.
// Format: ggml/docs/gguf.md (magic "GGUF", little-endian, 64-bit counts since v2).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mapped_file.h"
#include "core/types.h"

namespace crossword::gguf {

/// The file magic "GGUF" read as a little-endian uint32.
inline constexpr uint32_t kMagic = 0x46554747u;
/// Tensor data alignment when `general.alignment` is absent.
inline constexpr uint32_t kDefaultAlignment = 32;
/// Deepest nesting of arrays the reader accepts (arrays of arrays of ...). Real files use 1.
inline constexpr int kMaxArrayDepth = 8;
/// Most dimensions a tensor may have (ggml's GGML_MAX_DIMS).
inline constexpr int kMaxDims = 4;

/// Metadata value type ids as stored in the file (fixed by the format).
enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

/// "uint8", "int32", "float32", "bool", "string", "array", ... ("type#N" for an unknown id).
std::string ValueTypeName(ValueType type);
/// Bytes of one element of a fixed-size type (0 for string and array).
size_t ValueTypeSize(ValueType type);
/// True for the ten integer, float and bool types (fixed size, stored inline).
bool IsScalarType(ValueType type);

namespace internal {
struct ValueStorage;
}  // namespace internal

/// One metadata value: a scalar, a string, or an array (of scalars, strings or arrays).
///
/// Values read from a File are views into that file's mapping: strings and array payloads are not
/// copied, so a Value must not outlive its File. Values built with the factories own their data
/// (shared, immutable) and can be copied freely. Accessors never throw; they return std::nullopt
/// (or an empty span) when the value is not of a compatible type.
class Value {
 public:
  /// A uint8 zero (so containers of Value are default-constructible).
  Value();

  // ---- Factories for writing -------------------------------------------------------------
  static Value Uint8(uint8_t v);
  static Value Int8(int8_t v);
  static Value Uint16(uint16_t v);
  static Value Int16(int16_t v);
  static Value Uint32(uint32_t v);
  static Value Int32(int32_t v);
  static Value Float32(float v);
  static Value Bool(bool v);
  static Value String(std::string v);
  static Value Uint64(uint64_t v);
  static Value Int64(int64_t v);
  static Value Float64(double v);
  /// Array of strings.
  static Value Strings(std::vector<std::string> items);
  /// Array of int32 (e.g. tokenizer.ggml.token_type, rope.dimension_sections).
  static Value Int32s(std::span<const int32_t> items);
  /// Array of float32 (e.g. tokenizer.ggml.scores).
  static Value Float32s(std::span<const float> items);
  /// Array of any fixed-size type from its little-endian packed bytes (size must be a multiple of
  /// ValueTypeSize(element_type)). Throws crossword::Error on a bad element type or size.
  static Value ScalarArray(ValueType element_type, std::span<const std::byte> packed);
  /// Array whose items are Values of one type (scalars, strings, or arrays: nested arrays).
  /// An empty `items` gives an empty array of `element_type`. Throws crossword::Error if an item's
  /// type differs from `element_type`.
  static Value Array(ValueType element_type, std::vector<Value> items);

  // ---- Type --------------------------------------------------------------------------------
  ValueType type() const { return type_; }
  bool is_array() const { return type_ == ValueType::kArray; }
  /// Element type of an array (kArray for nested arrays). Undefined for non-arrays (kUint8).
  ValueType array_type() const { return elem_type_; }
  /// Number of elements of an array; 0 for non-arrays.
  uint64_t array_size() const { return count_; }

  // ---- Scalars -----------------------------------------------------------------------------
  /// Any integer type whose value fits in int64 (not bool, not floats).
  std::optional<int64_t> AsInt() const;
  /// Any integer type whose value is >= 0 (not bool, not floats).
  std::optional<uint64_t> AsUint() const;
  /// float32 or float64; integer types are converted too (a hyperparameter written as an int
  /// still reads as a float).
  std::optional<double> AsFloat() const;
  /// bool only.
  std::optional<bool> AsBool() const;
  /// string only; the view lives as long as the Value's storage (the File, or the Value).
  std::optional<std::string_view> AsString() const;

  // ---- Arrays ------------------------------------------------------------------------------
  /// Elements of an array of strings; std::nullopt for anything else.
  std::optional<std::span<const std::string_view>> StringArray() const;
  /// Elements of an integer array (any integer element type) whose values all fit in int32.
  std::optional<std::vector<int32_t>> Int32Array() const;
  /// Elements of an integer array (any integer element type) whose values all fit in int64.
  std::optional<std::vector<int64_t>> IntArray() const;
  /// Elements of a float32 or float64 array, as float.
  std::optional<std::vector<float>> Float32Array() const;
  /// Elements of a bool array.
  std::optional<std::vector<bool>> BoolArray() const;
  /// Packed little-endian payload of an array of a fixed-size type (zero-copy; may be unaligned),
  /// empty for other values.
  std::span<const std::byte> RawArrayBytes() const { return raw_; }
  /// Items of a nested array (array of arrays); empty span for anything else.
  std::span<const Value> NestedItems() const;
  /// Element `i` of any array as a Value (a copy for scalars, a view for strings/arrays).
  /// Throws crossword::Error if this is not an array or `i` is out of range.
  Value At(uint64_t i) const;

  /// Short human-readable rendering: scalars in full, strings quoted (cut at `max_chars`),
  /// arrays as "[type × N] first items...".
  std::string ToString(size_t max_items = 8, size_t max_chars = 80) const;

  /// Deep equality of type and contents (float compared bitwise).
  friend bool operator==(const Value& a, const Value& b);

 private:
  friend class File;
  friend class Reader;
  friend struct internal::ValueStorage;
  ValueType type_ = ValueType::kUint8;
  ValueType elem_type_ = ValueType::kUint8;
  uint64_t bits_ = 0;               // scalar payload, little-endian in the low bytes
  uint64_t count_ = 0;              // array element count
  std::string_view str_;            // string value
  std::span<const std::byte> raw_;  // packed payload of a fixed-size array
  std::shared_ptr<const internal::ValueStorage> storage_;  // strings/items, owned data
};

/// One metadata entry, in file order.
struct KeyValue {
  std::string_view key;
  Value value;
};

/// One tensor of a GGUF file. `ne` is in ggml order: ne[0] is contiguous; a GGUF weight
/// {n_in, n_out} is n_out rows of n_in elements. Unused dims are 1.
struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  int n_dims = 0;
  std::array<int64_t, 4> ne = {1, 1, 1, 1};
  uint64_t offset = 0;  ///< byte offset inside the data section (a multiple of the alignment)
  uint64_t nbytes = 0;  ///< bytes of data (= n_elements / block_size * type_size)
  const std::byte* data = nullptr;  ///< points into the file mapping; nullptr only if nbytes == 0

  /// Product of ne[0..n_dims).
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  /// Number of rows (n_elements / ne[0]).
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  std::span<const std::byte> bytes() const { return {data, static_cast<size_t>(nbytes)}; }
};

/// A parsed, validated GGUF file. Move-only; all views (keys, strings, tensor data) stay valid
/// while the File lives.
///
/// Validation (any failure throws crossword::Error naming the field, the tensor if any, and the
/// byte offset): magic; version 2 or 3 (big-endian files are recognised and refused); tensor and
/// metadata counts against the bytes left; every string and array length against the bytes left;
/// value types; array nesting deeper than kMaxArrayDepth; duplicate keys; `general.alignment`
/// (a power of two, uint32); tensor names (non-empty, unique), n_dims (1..4), dims (>= 0, rows a
/// multiple of the block size), element count and byte size without overflow; known tensor types;
/// offsets aligned, inside the data section, and tensors not overlapping. The reader allocates at
/// most a small multiple of the file size (string arrays as views, scalar arrays as raw spans).
class File {
 public:
  /// Maps (or reads, see MapOptions) and parses `path`. Throws crossword::Error on I/O errors and
  /// on any validation failure; messages start with the path.
  static File Open(const std::string& path, const MapOptions& options = {});
  /// Parses bytes the caller keeps alive for the lifetime of the File (tests, fuzzing).
  static File Parse(std::span<const std::byte> bytes);

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  /// Path given to Open ("<memory>" for Parse).
  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  /// Tensor data alignment (general.alignment or 32).
  uint64_t alignment() const { return alignment_; }
  /// Absolute byte offset of the tensor data section.
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return bytes_.size(); }
  /// The whole file.
  std::span<const std::byte> bytes() const { return bytes_; }
  /// The whole file when it is a read-only mmap that is not locked, so pages given back with
  /// madvise are read from the file again when touched; empty otherwise (read into memory,
  /// locked, or Parse).
  std::span<const std::byte> refaultable_bytes() const {
    return mapping_ && !is_read_into_memory() && !is_locked() ? bytes_
                                                              : std::span<const std::byte>{};
  }
  /// Opened and read into memory (`--no-mmap`), not mapped (false for Parse).
  bool is_read_into_memory() const { return mapping_ && !mapping_->is_mmap(); }
  /// Its pages are locked in memory (mlock).
  bool is_locked() const { return mapping_ && mapping_->is_locked(); }

  /// All metadata in file order.
  std::span<const KeyValue> metadata() const { return kvs_; }
  /// The value of `key`, or nullptr.
  const Value* Find(std::string_view key) const;

  /// Typed getters: std::nullopt when the key is missing; crossword::Error naming the key and
  /// the expected vs actual type when it is present with an incompatible type (or a negative
  /// value for GetUint). Conversions as in Value::AsInt/AsUint/AsFloat.
  std::optional<std::string_view> GetString(std::string_view key) const;
  std::optional<uint64_t> GetUint(std::string_view key) const;
  std::optional<int64_t> GetInt(std::string_view key) const;
  std::optional<double> GetFloat(std::string_view key) const;
  std::optional<bool> GetBool(std::string_view key) const;
  /// As Get*, but a missing key is a crossword::Error too ("key 'K' not found in FILE").
  std::string_view RequireString(std::string_view key) const;
  uint64_t RequireUint(std::string_view key) const;
  int64_t RequireInt(std::string_view key) const;
  double RequireFloat(std::string_view key) const;
  bool RequireBool(std::string_view key) const;
  /// `general.architecture`, or an empty view when absent.
  std::string_view architecture() const;

  /// All tensors in file (tensor-info) order.
  std::span<const TensorInfo> tensors() const { return tensors_; }
  /// The tensor called `name`, or nullptr.
  const TensorInfo* FindTensor(std::string_view name) const;

 private:
  friend class Reader;
  File();
  std::string path_;
  std::unique_ptr<MappedFile> mapping_;  // null for Parse
  std::span<const std::byte> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> kv_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

/// Streaming GGUF v3 writer: declare all metadata and tensor infos first, then stream each
/// tensor's bytes in declaration order (in as many pieces as convenient). Never holds tensor data;
/// the header is written on the first data call (or by Finish). Padding between tensors is zeros.
///
/// The writer writes straight to `path` (created or truncated). Callers that need an atomic result
/// write to a temporary name and rename after Finish (see tools/). Errors (I/O, misuse such as a
/// duplicate key/tensor, a tensor whose row is not a multiple of its block size, more or fewer
/// bytes than declared) throw crossword::Error naming the file and tensor.
class Writer {
 public:
  /// Opens `path` for writing (O_CREAT|O_TRUNC, mode 0644).
  explicit Writer(const std::string& path);
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  /// Closes the file if Finish was not called (the partial file is left for the caller to remove).
  ~Writer();

  /// Adds a metadata entry (in this order). `general.alignment` (uint32, power of two) also sets
  /// the data alignment; otherwise it is 32. Throws on a duplicate key or after the header is out.
  void AddKeyValue(std::string key, Value value);
  /// Declares a tensor; `ne` in ggml order, 1..4 dims. Returns its byte size.
  uint64_t AddTensor(std::string name, GgmlType type, std::span<const int64_t> ne);
  uint64_t AddTensor(std::string name, GgmlType type, std::initializer_list<int64_t> ne) {
    return AddTensor(std::move(name), type, std::span<const int64_t>(ne.begin(), ne.size()));
  }

  /// Size the finished file will have (valid once all tensors are declared).
  uint64_t PlannedFileSize() const;
  /// Offset of the data section (valid once all key-values and tensors are declared).
  uint64_t PlannedDataOffset() const;

  /// Writes the header, metadata and tensor infos now (optional; data calls do it implicitly).
  void WriteHeader();
  /// Appends bytes to the current tensor; moves on to the next tensor (writing the padding)
  /// when the current one is complete.
  void WriteTensorData(std::span<const std::byte> bytes);
  /// As WriteTensorData, with `nbytes` copied from `fd` at `offset` inside the kernel
  /// (copy_file_range, falling back to pread/write). Used by `gguf patch` to copy tensors.
  void CopyTensorData(int fd, uint64_t offset, uint64_t nbytes);
  /// Name of the tensor the next data bytes belong to ("" when all are complete).
  std::string_view current_tensor() const;
  /// Bytes written to the file so far (including bytes still in the writer's buffer).
  uint64_t bytes_written() const { return written_ + buffer_.size(); }

  /// Checks every tensor is complete, flushes, fsyncs and closes. Throws on any failure.
  void Finish();
  /// Instead of the data: writes the header and extends the file to its planned size, so every
  /// tensor reads as zeros from a hole that takes no disk space (speed tests that generate the
  /// weights on a device). Only before any tensor data. Closes the file.
  void FinishSparse();

 private:
  struct PlannedTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    uint64_t offset;
    uint64_t nbytes;
  };
  void Flush();
  void Append(const void* data, size_t n);
  void PadTo(uint64_t multiple);
  void Advance(uint64_t n);
  void WriteAll(const std::byte* data, size_t n);

  std::string path_;
  int fd_ = -1;
  bool header_written_ = false;
  bool finished_ = false;
  uint64_t alignment_ = kDefaultAlignment;
  std::vector<std::pair<std::string, Value>> kvs_;
  std::vector<PlannedTensor> tensors_;
  uint64_t data_size_ = 0;     // planned data section size (before final padding)
  size_t current_ = 0;         // index of the tensor being written
  uint64_t current_done_ = 0;  // bytes of it written
  uint64_t written_ = 0;       // bytes handed to the kernel
  std::vector<std::byte> buffer_;
};

}  // namespace crossword::gguf
