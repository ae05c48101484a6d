// gguf::Value: construction, typed access, rendering and equality of metadata values.
#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "gguf/gguf.h"
#include "gguf/value_storage.h"

namespace crossword::gguf {
namespace {

bool IsSignedInt(ValueType t) {
  return t == ValueType::kInt8 || t == ValueType::kInt16 || t == ValueType::kInt32 ||
         t == ValueType::kInt64;
}
bool IsUnsignedInt(ValueType t) {
  return t == ValueType::kUint8 || t == ValueType::kUint16 || t == ValueType::kUint32 ||
         t == ValueType::kUint64;
}
bool IsFloat(ValueType t) { return t == ValueType::kFloat32 || t == ValueType::kFloat64; }

double BitsToDouble(ValueType t, uint64_t bits) {
  if (t == ValueType::kFloat32) return std::bit_cast<float>(static_cast<uint32_t>(bits));
  if (t == ValueType::kFloat64) return std::bit_cast<double>(bits);
  if (IsSignedInt(t)) return static_cast<double>(static_cast<int64_t>(bits));
  return static_cast<double>(bits);
}

std::string Quote(std::string_view s, size_t max_chars) {
  std::string out = "\"";
  size_t n = 0;
  for (char c : s) {
    if (n++ == max_chars) {
      out += "...";
      break;
    }
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  out += "\"";
  return out;
}

}  // namespace

std::string ValueTypeName(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
      return "uint8";
    case ValueType::kInt8:
      return "int8";
    case ValueType::kUint16:
      return "uint16";
    case ValueType::kInt16:
      return "int16";
    case ValueType::kUint32:
      return "uint32";
    case ValueType::kInt32:
      return "int32";
    case ValueType::kFloat32:
      return "float32";
    case ValueType::kBool:
      return "bool";
    case ValueType::kString:
      return "string";
    case ValueType::kArray:
      return "array";
    case ValueType::kUint64:
      return "uint64";
    case ValueType::kInt64:
      return "int64";
    case ValueType::kFloat64:
      return "float64";
  }
  return fmt::format("type#{}", static_cast<uint32_t>(type));
}

size_t ValueTypeSize(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool:
      return 1;
    case ValueType::kUint16:
    case ValueType::kInt16:
      return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32:
      return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

bool IsScalarType(ValueType type) { return ValueTypeSize(type) != 0; }

namespace internal {

uint64_t LoadScalarBits(ValueType type, const std::byte* p) {
  switch (ValueTypeSize(type)) {
    case 1: {
      uint8_t v;
      std::memcpy(&v, p, 1);
      return type == ValueType::kInt8
                 ? static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(v)))
                 : v;
    }
    case 2: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return type == ValueType::kInt16
                 ? static_cast<uint64_t>(static_cast<int64_t>(static_cast<int16_t>(v)))
                 : v;
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return type == ValueType::kInt32
                 ? static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(v)))
                 : v;
    }
    case 8: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
    default:
      return 0;
  }
}

Value ValueStorage::Scalar(ValueType type, uint64_t bits) {
  Value v;
  v.type_ = type;
  v.bits_ = bits;
  return v;
}

}  // namespace internal

using internal::ValueStorage;

Value::Value() = default;

Value Value::Uint8(uint8_t v) { return ValueStorage::Scalar(ValueType::kUint8, v); }
Value Value::Int8(int8_t v) {
  return ValueStorage::Scalar(ValueType::kInt8, static_cast<uint64_t>(int64_t{v}));
}
Value Value::Uint16(uint16_t v) { return ValueStorage::Scalar(ValueType::kUint16, v); }
Value Value::Int16(int16_t v) {
  return ValueStorage::Scalar(ValueType::kInt16, static_cast<uint64_t>(int64_t{v}));
}
Value Value::Uint32(uint32_t v) { return ValueStorage::Scalar(ValueType::kUint32, v); }
Value Value::Int32(int32_t v) {
  return ValueStorage::Scalar(ValueType::kInt32, static_cast<uint64_t>(int64_t{v}));
}
Value Value::Float32(float v) {
  return ValueStorage::Scalar(ValueType::kFloat32, std::bit_cast<uint32_t>(v));
}
Value Value::Bool(bool v) { return ValueStorage::Scalar(ValueType::kBool, v ? 1 : 0); }
Value Value::Uint64(uint64_t v) { return ValueStorage::Scalar(ValueType::kUint64, v); }
Value Value::Int64(int64_t v) {
  return ValueStorage::Scalar(ValueType::kInt64, static_cast<uint64_t>(v));
}
Value Value::Float64(double v) {
  return ValueStorage::Scalar(ValueType::kFloat64, std::bit_cast<uint64_t>(v));
}

Value Value::String(std::string v) {
  auto storage = std::make_shared<ValueStorage>();
  storage->text = std::move(v);
  Value out;
  out.type_ = ValueType::kString;
  out.str_ = storage->text;
  out.storage_ = std::move(storage);
  return out;
}

Value Value::Strings(std::vector<std::string> items) {
  auto storage = std::make_shared<ValueStorage>();
  storage->owned_strings = std::move(items);
  storage->strings.assign(storage->owned_strings.begin(), storage->owned_strings.end());
  Value out;
  out.type_ = ValueType::kArray;
  out.elem_type_ = ValueType::kString;
  out.count_ = storage->strings.size();
  out.storage_ = std::move(storage);
  return out;
}

Value Value::ScalarArray(ValueType element_type, std::span<const std::byte> packed) {
  const size_t size = ValueTypeSize(element_type);
  Check(size != 0, "Value::ScalarArray: element type {} is not a fixed-size type",
        ValueTypeName(element_type));
  Check(packed.size() % size == 0,
        "Value::ScalarArray: {} bytes is not a whole number of {} ({} bytes each)", packed.size(),
        ValueTypeName(element_type), size);
  auto storage = std::make_shared<ValueStorage>();
  storage->bytes.assign(packed.begin(), packed.end());
  Value out;
  out.type_ = ValueType::kArray;
  out.elem_type_ = element_type;
  out.count_ = packed.size() / size;
  out.raw_ = storage->bytes;
  out.storage_ = std::move(storage);
  return out;
}

Value Value::Int32s(std::span<const int32_t> items) {
  return ScalarArray(ValueType::kInt32, std::as_bytes(items));
}

Value Value::Float32s(std::span<const float> items) {
  return ScalarArray(ValueType::kFloat32, std::as_bytes(items));
}

Value Value::Array(ValueType element_type, std::vector<Value> items) {
  for (size_t i = 0; i < items.size(); ++i) {
    Check(items[i].type() == element_type, "Value::Array: item {} has type {}, expected {}", i,
          ValueTypeName(items[i].type()), ValueTypeName(element_type));
  }
  if (IsScalarType(element_type)) {
    const size_t size = ValueTypeSize(element_type);
    std::vector<std::byte> packed(items.size() * size);
    for (size_t i = 0; i < items.size(); ++i) std::memcpy(&packed[i * size], &items[i].bits_, size);
    return ScalarArray(element_type, packed);  // little-endian host: low bytes come first
  }
  Check(element_type == ValueType::kString || element_type == ValueType::kArray,
        "Value::Array: unknown element type {}", ValueTypeName(element_type));
  auto storage = std::make_shared<ValueStorage>();
  Value out;
  out.type_ = ValueType::kArray;
  out.elem_type_ = element_type;
  out.count_ = items.size();
  if (element_type == ValueType::kString) {
    for (const Value& item : items) storage->strings.push_back(item.str_);
  }
  storage->items = std::move(items);  // keeps the strings' storage alive
  out.storage_ = std::move(storage);
  return out;
}

std::optional<int64_t> Value::AsInt() const {
  if (IsSignedInt(type_)) return static_cast<int64_t>(bits_);
  if (IsUnsignedInt(type_) && bits_ <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(bits_);
  }
  return std::nullopt;
}

std::optional<uint64_t> Value::AsUint() const {
  if (IsUnsignedInt(type_)) return bits_;
  if (IsSignedInt(type_) && static_cast<int64_t>(bits_) >= 0) return bits_;
  return std::nullopt;
}

std::optional<double> Value::AsFloat() const {
  if (IsFloat(type_) || IsSignedInt(type_) || IsUnsignedInt(type_))
    return BitsToDouble(type_, bits_);
  return std::nullopt;
}

std::optional<bool> Value::AsBool() const {
  if (type_ == ValueType::kBool) return bits_ != 0;
  return std::nullopt;
}

std::optional<std::string_view> Value::AsString() const {
  if (type_ == ValueType::kString) return str_;
  return std::nullopt;
}

std::optional<std::span<const std::string_view>> Value::StringArray() const {
  if (type_ != ValueType::kArray || elem_type_ != ValueType::kString) return std::nullopt;
  if (!storage_) return std::span<const std::string_view>();
  return std::span<const std::string_view>(storage_->strings);
}

std::optional<std::vector<int64_t>> Value::IntArray() const {
  if (type_ != ValueType::kArray || !(IsSignedInt(elem_type_) || IsUnsignedInt(elem_type_))) {
    return std::nullopt;
  }
  const size_t size = ValueTypeSize(elem_type_);
  std::vector<int64_t> out(count_);
  for (uint64_t i = 0; i < count_; ++i) {
    const uint64_t bits = internal::LoadScalarBits(elem_type_, raw_.data() + i * size);
    if (IsUnsignedInt(elem_type_) &&
        bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return std::nullopt;
    }
    out[i] = static_cast<int64_t>(bits);
  }
  return out;
}

std::optional<std::vector<int32_t>> Value::Int32Array() const {
  auto wide = IntArray();
  if (!wide) return std::nullopt;
  std::vector<int32_t> out(wide->size());
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t v = (*wide)[i];
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
      return std::nullopt;
    }
    out[i] = static_cast<int32_t>(v);
  }
  return out;
}

std::optional<std::vector<float>> Value::Float32Array() const {
  if (type_ != ValueType::kArray || !IsFloat(elem_type_)) return std::nullopt;
  const size_t size = ValueTypeSize(elem_type_);
  std::vector<float> out(count_);
  for (uint64_t i = 0; i < count_; ++i) {
    out[i] = static_cast<float>(
        BitsToDouble(elem_type_, internal::LoadScalarBits(elem_type_, raw_.data() + i * size)));
  }
  return out;
}

std::optional<std::vector<bool>> Value::BoolArray() const {
  if (type_ != ValueType::kArray || elem_type_ != ValueType::kBool) return std::nullopt;
  std::vector<bool> out(count_);
  for (uint64_t i = 0; i < count_; ++i) out[i] = raw_[i] != std::byte{0};
  return out;
}

std::span<const Value> Value::NestedItems() const {
  if (type_ != ValueType::kArray || elem_type_ != ValueType::kArray || !storage_) return {};
  return storage_->items;
}

Value Value::At(uint64_t i) const {
  Check(type_ == ValueType::kArray, "Value::At({}) on a {} value", i, ValueTypeName(type_));
  Check(i < count_, "Value::At({}) on an array of {} elements", i, count_);
  if (IsScalarType(elem_type_)) {
    return ValueStorage::Scalar(
        elem_type_,
        internal::LoadScalarBits(elem_type_, raw_.data() + i * ValueTypeSize(elem_type_)));
  }
  if (elem_type_ == ValueType::kString) {
    Value out;
    out.type_ = ValueType::kString;
    out.str_ = storage_->strings[i];
    out.storage_ = storage_;
    return out;
  }
  return storage_->items[i];
}

std::string Value::ToString(size_t max_items, size_t max_chars) const {
  switch (type_) {
    case ValueType::kString:
      return Quote(str_, max_chars);
    case ValueType::kBool:
      return bits_ ? "true" : "false";
    case ValueType::kFloat32:
      return fmt::format("{}", std::bit_cast<float>(static_cast<uint32_t>(bits_)));
    case ValueType::kFloat64:
      return fmt::format("{}", std::bit_cast<double>(bits_));
    case ValueType::kArray: {
      std::string out = fmt::format("[{} x {}]", ValueTypeName(elem_type_), count_);
      const uint64_t shown = std::min<uint64_t>(count_, max_items);
      for (uint64_t i = 0; i < shown; ++i) {
        out += i == 0 ? " " : ", ";
        out += At(i).ToString(max_items, max_chars);
      }
      if (shown < count_) out += ", ...";
      return out;
    }
    default:
      if (IsSignedInt(type_)) return fmt::format("{}", static_cast<int64_t>(bits_));
      return fmt::format("{}", bits_);
  }
}

bool operator==(const Value& a, const Value& b) {
  if (a.type_ != b.type_) return false;
  if (a.type_ == ValueType::kString) return a.str_ == b.str_;
  if (a.type_ != ValueType::kArray) return a.bits_ == b.bits_;
  if (a.elem_type_ != b.elem_type_ || a.count_ != b.count_) return false;
  if (IsScalarType(a.elem_type_)) {
    return a.raw_.size() == b.raw_.size() &&
           (a.raw_.empty() || std::memcmp(a.raw_.data(), b.raw_.data(), a.raw_.size()) == 0);
  }
  if (a.elem_type_ == ValueType::kString) {
    auto sa = *a.StringArray(), sb = *b.StringArray();
    for (size_t i = 0; i < sa.size(); ++i) {
      if (sa[i] != sb[i]) return false;
    }
    return true;
  }
  auto ia = a.NestedItems(), ib = b.NestedItems();
  for (size_t i = 0; i < ia.size(); ++i) {
    if (!(ia[i] == ib[i])) return false;
  }
  return true;
}

}  // namespace crossword::gguf
