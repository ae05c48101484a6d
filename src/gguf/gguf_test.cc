// Tests for the GGUF reader and writer: round trips of every value and tensor type, typed
// getters, and hostile input (every truncation, random byte flips, oversized counts, overlaps)
// that must give crossword::Error without crashing or allocating more than a few times the file.
#include "gguf/gguf.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"

// Heap accounting for the memory-bound test: counts bytes currently allocated by this process.
// (Test-only global state; the library itself has none.)
namespace {
std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};
}  // namespace

void* operator new(size_t n) {
  void* p = std::malloc(n + 16);
  if (!p) throw std::bad_alloc();
  *static_cast<size_t*>(p) = n;
  const int64_t live = g_live_bytes.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
  int64_t peak = g_peak_bytes.load();
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live)) {
  }
  return static_cast<char*>(p) + 16;
}
void operator delete(void* p) noexcept {
  if (!p) return;
  char* base = static_cast<char*>(p) - 16;
  g_live_bytes.fetch_sub(static_cast<int64_t>(*reinterpret_cast<size_t*>(base)));
  std::free(base);
}
void operator delete(void* p, size_t) noexcept { operator delete(p); }

namespace crossword::gguf {
namespace {

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/gguf_test_" + name;
}

std::vector<std::byte> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

// Every metadata type, including nested and empty arrays.
std::vector<std::pair<std::string, Value>> AllValues() {
  const int32_t i32[] = {-7, 0, 2147483647};
  const float f32[] = {1.5f, -0.0f, 3e38f};
  const uint16_t u16[] = {1, 65535};
  std::vector<std::pair<std::string, Value>> kv = {
      {"general.architecture", Value::String("qwen35moe")},
      {"t.u8", Value::Uint8(200)},
      {"t.i8", Value::Int8(-100)},
      {"t.u16", Value::Uint16(60000)},
      {"t.i16", Value::Int16(-30000)},
      {"t.u32", Value::Uint32(4000000000u)},
      {"t.i32", Value::Int32(-2000000000)},
      {"t.f32", Value::Float32(0.95f)},
      {"t.bool", Value::Bool(true)},
      {"t.str", Value::String("h\xc3\xa9llo\n{{ x }}")},
      {"t.empty_str", Value::String("")},
      {"t.u64", Value::Uint64(18000000000000000000ull)},
      {"t.i64", Value::Int64(-9000000000000000000ll)},
      {"t.f64", Value::Float64(1e-300)},
      {"t.arr_i32", Value::Int32s(i32)},
      {"t.arr_f32", Value::Float32s(f32)},
      {"t.arr_u16", Value::ScalarArray(ValueType::kUint16, std::as_bytes(std::span(u16)))},
      {"t.arr_bool", Value::Array(ValueType::kBool, {Value::Bool(true), Value::Bool(false)})},
      {"t.arr_str", Value::Strings({"a", "", "<|im_start|>", std::string(300, 'x')})},
      {"t.arr_empty", Value::Array(ValueType::kFloat64, {})},
      {"t.arr_empty_str", Value::Strings({})},
      {"t.nested",
       Value::Array(ValueType::kArray, {Value::Int32s(i32), Value::Array(ValueType::kInt32, {}),
                                        Value::Array(ValueType::kInt32, {Value::Int32(5)})})},
      {"t.nested_str",
       Value::Array(ValueType::kArray, {Value::Strings({"x", "yy"}), Value::Strings({})})},
      {"t.nested3", Value::Array(ValueType::kArray,
                                 {Value::Array(ValueType::kArray, {Value::Strings({"deep"})})})},
  };
  return kv;
}

// The supported tensor types with a shape valid for each.
struct TensorSpec {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;
};

std::vector<TensorSpec> AllTensors() {
  std::vector<TensorSpec> t;
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kQ4_0, GgmlType::kQ4_1,
                            GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ8_1,
                            GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K,
                            GgmlType::kQ6_K, GgmlType::kQ8_K, GgmlType::kI8,   GgmlType::kI16,
                            GgmlType::kI32,  GgmlType::kI64,  GgmlType::kF64,  GgmlType::kBF16};
  int i = 0;
  for (GgmlType type : types) {
    const int64_t bs = GetTypeTraits(type).block_size;
    std::vector<int64_t> ne = {bs * (1 + i % 2)};
    for (int d = 1; d <= i % 4; ++d) ne.push_back(d + 1);
    t.push_back({"tensor." + std::string(TypeName(type)), type, ne});
    ++i;
  }
  t.push_back({"blk.0.ssm_a", GgmlType::kF32, {32}});
  t.push_back({"empty", GgmlType::kF32, {0, 4}});  // zero elements: no data
  return t;
}

std::vector<std::byte> TensorBytes(uint64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng());
  return b;
}

std::string WriteSample(const std::string& name, uint32_t alignment = 0) {
  const std::string path = TempPath(name);
  Writer w(path);
  if (alignment) w.AddKeyValue("general.alignment", Value::Uint32(alignment));
  for (auto& [k, v] : AllValues()) w.AddKeyValue(k, v);
  auto tensors = AllTensors();
  for (auto& t : tensors) w.AddTensor(t.name, t.type, t.ne);
  uint32_t seed = 0;
  for (auto& t : tensors) {
    uint64_t n = *RowBytes(t.type, t.ne[0]);
    for (size_t d = 1; d < t.ne.size(); ++d) n *= t.ne[d];
    auto bytes = TensorBytes(n, seed++);
    // Stream in uneven pieces to exercise the buffering.
    size_t off = 0;
    while (off < bytes.size()) {
      const size_t piece = std::min<size_t>(bytes.size() - off, 7 + off % 13);
      w.WriteTensorData(std::span(bytes).subspan(off, piece));
      off += piece;
    }
  }
  const uint64_t planned = w.PlannedFileSize();
  w.Finish();
  EXPECT_EQ(ReadAll(path).size(), planned);
  return path;
}

TEST(Gguf, RoundTripEveryValueAndTensorType) {
  for (uint32_t alignment : {0u, 64u}) {
    const std::string path = WriteSample("roundtrip.gguf", alignment);
    File f = File::Open(path);
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), alignment ? alignment : 32u);
    EXPECT_EQ(f.data_offset() % f.alignment(), 0u);
    auto values = AllValues();
    ASSERT_EQ(f.metadata().size(), values.size() + (alignment ? 1 : 0));
    size_t i = alignment ? 1 : 0;
    for (auto& [k, v] : values) {
      EXPECT_EQ(f.metadata()[i].key, k);
      EXPECT_TRUE(f.metadata()[i].value == v)
          << k << ": " << f.metadata()[i].value.ToString() << " vs " << v.ToString();
      ASSERT_NE(f.Find(k), nullptr);
      ++i;
    }
    auto tensors = AllTensors();
    ASSERT_EQ(f.tensors().size(), tensors.size());
    uint32_t seed = 0;
    for (size_t t = 0; t < tensors.size(); ++t) {
      const TensorInfo& info = f.tensors()[t];
      EXPECT_EQ(info.name, tensors[t].name);
      EXPECT_EQ(info.type, tensors[t].type);
      EXPECT_EQ(info.n_dims, static_cast<int>(tensors[t].ne.size()));
      for (size_t d = 0; d < 4; ++d) {
        EXPECT_EQ(info.ne[d], d < tensors[t].ne.size() ? tensors[t].ne[d] : 1);
      }
      EXPECT_EQ(info.offset % f.alignment(), 0u);
      auto expect = TensorBytes(info.nbytes, seed++);
      ASSERT_EQ(info.bytes().size(), expect.size());
      if (!expect.empty()) {
        EXPECT_EQ(std::memcmp(info.bytes().data(), expect.data(), expect.size()), 0) << info.name;
      }
      EXPECT_EQ(f.FindTensor(info.name), &info);
    }
    EXPECT_EQ(f.FindTensor("missing"), nullptr);
    EXPECT_EQ(f.architecture(), "qwen35moe");
    std::remove(path.c_str());
  }
}

TEST(Gguf, ValueAccessorsAndConversions) {
  EXPECT_EQ(Value::Uint8(200).AsInt(), 200);
  EXPECT_EQ(Value::Int8(-3).AsInt(), -3);
  EXPECT_FALSE(Value::Int8(-3).AsUint().has_value());
  EXPECT_FALSE(Value::Uint64(~0ull).AsInt().has_value());
  EXPECT_EQ(Value::Uint64(~0ull).AsUint(), ~0ull);
  EXPECT_EQ(Value::Int32(7).AsFloat(), 7.0);
  EXPECT_EQ(Value::Float32(0.95f).AsFloat(), static_cast<double>(0.95f));
  EXPECT_FALSE(Value::Float32(1).AsInt().has_value());
  EXPECT_FALSE(Value::Bool(true).AsInt().has_value());
  EXPECT_EQ(Value::Bool(true).AsBool(), true);
  EXPECT_FALSE(Value::String("x").AsBool().has_value());
  EXPECT_EQ(Value::String("x").AsString(), "x");
  const int32_t s[] = {11, 11, 10, 0};
  Value sec = Value::Int32s(s);
  EXPECT_EQ(sec.array_type(), ValueType::kInt32);
  EXPECT_EQ(sec.array_size(), 4u);
  EXPECT_EQ(*sec.Int32Array(), std::vector<int32_t>({11, 11, 10, 0}));
  EXPECT_EQ(*sec.IntArray(), std::vector<int64_t>({11, 11, 10, 0}));
  EXPECT_FALSE(sec.Float32Array().has_value());
  EXPECT_FALSE(sec.StringArray().has_value());
  EXPECT_EQ(sec.At(2).AsInt(), 10);
  EXPECT_THROW(sec.At(4), Error);
  EXPECT_THROW(Value::Int32(1).At(0), Error);
  const int64_t big[] = {1ll << 40};
  EXPECT_FALSE(Value::ScalarArray(ValueType::kInt64, std::as_bytes(std::span(big)))
                   .Int32Array()
                   .has_value());
  Value strs = Value::Strings({"a", "bc"});
  EXPECT_EQ((*strs.StringArray())[1], "bc");
  EXPECT_EQ(strs.At(1).AsString(), "bc");
  EXPECT_THROW(Value::Array(ValueType::kInt32, {Value::Int32(1), Value::Uint32(2)}), Error);
  EXPECT_THROW(Value::ScalarArray(ValueType::kString, {}), Error);
  EXPECT_NE(strs.ToString().find("bc"), std::string::npos);
}

TEST(Gguf, TypedGettersNameKeyAndTypes) {
  const std::string path = WriteSample("getters.gguf");
  File f = File::Open(path);
  EXPECT_EQ(f.GetUint("t.u32"), 4000000000u);
  EXPECT_EQ(f.GetInt("t.i16"), -30000);
  EXPECT_EQ(f.GetFloat("t.f32"), static_cast<double>(0.95f));
  EXPECT_EQ(f.GetBool("t.bool"), true);
  EXPECT_EQ(f.GetString("t.str"), "h\xc3\xa9llo\n{{ x }}");
  EXPECT_FALSE(f.GetUint("absent").has_value());
  try {
    f.GetUint("t.str");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("t.str"), std::string::npos) << m;
    EXPECT_NE(m.find("string"), std::string::npos) << m;
    EXPECT_NE(m.find("non-negative integer"), std::string::npos) << m;
  }
  EXPECT_THROW(f.GetUint("t.i8"), Error);  // negative
  try {
    f.RequireFloat("clover_moe.diffusion.threshold");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("clover_moe.diffusion.threshold"), std::string::npos);
  }
  EXPECT_EQ(f.RequireString("general.architecture"), "qwen35moe");
  std::remove(path.c_str());
}

TEST(Gguf, WriterRejectsMisuse) {
  const std::string path = TempPath("misuse.gguf");
  {
    Writer w(path);
    w.AddKeyValue("a", Value::Uint32(1));
    EXPECT_THROW(w.AddKeyValue("a", Value::Uint32(2)), Error);
    EXPECT_THROW(w.AddKeyValue("general.alignment", Value::Uint32(48)), Error);
    EXPECT_THROW(w.AddTensor("q", GgmlType::kQ4_K, {100}), Error);  // not a multiple of 256
    EXPECT_THROW(w.AddTensor("x", GgmlType::kF32, {1, 2, 3, 4, 5}), Error);
    w.AddTensor("t", GgmlType::kF32, {4});
    EXPECT_THROW(w.AddTensor("t", GgmlType::kF32, {4}), Error);
    std::vector<std::byte> b(8);
    w.WriteTensorData(b);
    EXPECT_THROW(w.AddKeyValue("late", Value::Bool(true)), Error);
    EXPECT_THROW(w.Finish(), Error);  // 8 of 16 bytes
  }
  {
    Writer w(path);
    w.AddTensor("t", GgmlType::kF32, {2});
    std::vector<std::byte> b(12);
    EXPECT_THROW(w.WriteTensorData(b), Error);  // 4 bytes too many
  }
  EXPECT_THROW(Writer("/nonexistent-dir/x.gguf"), Error);
  std::remove(path.c_str());
}

TEST(Gguf, CopyTensorDataFromAnotherFile) {
  const std::string src_path = WriteSample("copy_src.gguf");
  File src = File::Open(src_path);
  const std::string dst_path = TempPath("copy_dst.gguf");
  {
    Writer w(dst_path);
    w.AddKeyValue("general.architecture", Value::String("copy"));
    for (const TensorInfo& t : src.tensors()) {
      w.AddTensor(t.name, t.type, std::span<const int64_t>(t.ne.data(), t.n_dims));
    }
    std::FILE* in = std::fopen(src_path.c_str(), "rb");
    ASSERT_NE(in, nullptr);
    for (const TensorInfo& t : src.tensors()) {
      w.CopyTensorData(fileno(in), src.data_offset() + t.offset, t.nbytes);
    }
    std::fclose(in);
    w.Finish();
  }
  File dst = File::Open(dst_path);
  ASSERT_EQ(dst.tensors().size(), src.tensors().size());
  for (size_t i = 0; i < src.tensors().size(); ++i) {
    const auto& a = src.tensors()[i];
    const auto& b = dst.tensors()[i];
    ASSERT_EQ(a.nbytes, b.nbytes);
    if (a.nbytes > 0) {
      EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0) << a.name;
    }
  }
  std::remove(src_path.c_str());
  std::remove(dst_path.c_str());
}

// ---- Hostile input ---------------------------------------------------------------------------

// Parses and touches everything; returns "" on success or the error message.
std::string TryParse(std::span<const std::byte> bytes) {
  try {
    File f = File::Parse(bytes);
    size_t sink = 0;
    for (const KeyValue& kv : f.metadata()) sink += kv.key.size() + kv.value.ToString(4).size();
    for (const TensorInfo& t : f.tensors()) {
      for (std::byte b : t.bytes()) sink += static_cast<size_t>(b);
    }
    return sink == static_cast<size_t>(-1) ? "impossible" : "";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_FALSE(m.empty());
    return m.empty() ? "?" : m;
  }
}

class HostileInput : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = TempPath("hostile.gguf");
    Writer w(path);
    w.AddKeyValue("general.architecture", Value::String("qwen35moe"));
    w.AddKeyValue("a.u32", Value::Uint32(7));
    w.AddKeyValue("a.strs", Value::Strings({"<|im_start|>", "Ġthe", ""}));
    const int32_t s[] = {11, 11, 10, 0};
    w.AddKeyValue("a.nested",
                  Value::Array(ValueType::kArray, {Value::Int32s(s), Value::Strings({"q"})}));
    w.AddTensor("token_embd.weight", GgmlType::kQ8_0, {64, 3});
    w.AddTensor("blk.0.ssm_a", GgmlType::kF32, {4});
    w.AddTensor("output.weight", GgmlType::kQ4_K, {256, 1});
    w.WriteTensorData(TensorBytes(6 * 34, 1));
    w.WriteTensorData(TensorBytes(16, 2));
    w.WriteTensorData(TensorBytes(144, 3));
    w.Finish();
    file_ = ReadAll(path);
    std::remove(path.c_str());
  }
  std::vector<std::byte> file_;
};

TEST_F(HostileInput, EveryTruncationIsAnError) {
  ASSERT_EQ(TryParse(file_), "");
  // Every prefix that cuts into a tensor (not just the final padding) must be refused.
  File whole = File::Parse(file_);
  uint64_t data_end = 0;
  for (const TensorInfo& t : whole.tensors()) data_end = std::max(data_end, t.offset + t.nbytes);
  const size_t needed = whole.data_offset() + data_end;
  ASSERT_LT(needed, file_.size());  // there is trailing padding to cut harmlessly
  for (size_t len = 0; len < file_.size(); ++len) {
    std::vector<std::byte> cut(file_.begin(), file_.begin() + len);  // exact-size copy for ASan
    const std::string m = TryParse(cut);
    if (len >= needed) {
      ASSERT_EQ(m, "") << "truncating only padding, to " << len << " bytes";
      continue;
    }
    ASSERT_NE(m, "") << "truncation to " << len << " bytes parsed";
    ASSERT_NE(m.find("byte"), std::string::npos) << m;
  }
}

TEST_F(HostileInput, RandomByteFlipsNeverCrash) {
  std::mt19937 rng(42);
  int errors = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<std::byte> m = file_;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      // Bias towards the header, where the structure lives.
      const size_t at = rng() % 2 ? rng() % std::min<size_t>(m.size(), 400) : rng() % m.size();
      m[at] = static_cast<std::byte>(rng() % 3 == 0 ? 0xff : rng());
    }
    if (!TryParse(m).empty()) ++errors;
  }
  EXPECT_GT(errors, 1000);  // the flips do hit the structure
}

// Little-endian byte builder for hand-made headers.
struct Bytes {
  std::vector<std::byte> b;
  template <typename T>
  Bytes& Put(T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& Str(std::string_view s) {
    Put<uint64_t>(s.size());
    for (char c : s) b.push_back(static_cast<std::byte>(c));
    return *this;
  }
  Bytes& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return Put<uint32_t>(kMagic).Put<uint32_t>(version).Put<uint64_t>(n_tensors).Put<uint64_t>(
        n_kv);
  }
  Bytes& Tensor(std::string_view name, std::vector<int64_t> ne, uint32_t type, uint64_t offset) {
    Str(name).Put<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) Put<int64_t>(d);
    return Put<uint32_t>(type).Put<uint64_t>(offset);
  }
  Bytes& PadTo(size_t a) {
    while (b.size() % a) b.push_back(std::byte{0});
    return *this;
  }
  Bytes& Zeros(size_t n) {
    b.insert(b.end(), n, std::byte{0});
    return *this;
  }
};

void ExpectError(const std::vector<std::byte>& bytes, const std::vector<std::string>& needles) {
  const std::string m = TryParse(bytes);
  ASSERT_NE(m, "") << "parsed but should not";
  for (const auto& n : needles)
    EXPECT_NE(m.find(n), std::string::npos) << "'" << n << "' not in: " << m;
}

TEST(GgufValidation, HeaderErrors) {
  ExpectError(Bytes().Put<uint32_t>(0x46554746).Zeros(20).b, {"magic", "at byte 0"});
  ExpectError(Bytes().Header(0, 0, 1).b, {"version 1"});
  ExpectError(Bytes().Header(0, 0, 0x03000000).b, {"big-endian"});
  ExpectError(Bytes().Header(0, 0, 4).b, {"version 4"});
  ExpectError(Bytes().Header(~0ull, 0).b, {"tensor count", "at byte 8"});
  ExpectError(Bytes().Header(0, 1ull << 60).b, {"metadata count", "at byte 16"});
  ExpectError(Bytes().Put<uint32_t>(kMagic).b, {"version"});
}

TEST(GgufValidation, MetadataErrors) {
  ExpectError(Bytes().Header(0, 1).Put<uint64_t>(1ull << 62).Zeros(16).b, {"key", "length"});
  ExpectError(Bytes().Header(0, 1).Str("k").Put<uint32_t>(13).Zeros(8).b, {"'k'", "value type"});
  ExpectError(Bytes().Header(0, 1).Str("k").Put<uint32_t>(8).Put<uint64_t>(~0ull).b,
              {"'k'", "string value", "length"});
  // Array of 2^40 uint32 elements in a tiny file.
  ExpectError(
      Bytes().Header(0, 1).Str("k").Put<uint32_t>(9).Put<uint32_t>(4).Put<uint64_t>(1ull << 40).b,
      {"'k'", "array of 1099511627776 uint32"});
  ExpectError(Bytes()
                  .Header(0, 1)
                  .Str("k")
                  .Put<uint32_t>(9)
                  .Put<uint32_t>(8)
                  .Put<uint64_t>(1ull << 61)
                  .Zeros(16)
                  .b,
              {"array of", "string"});
  Bytes deep;
  deep.Header(0, 1).Str("k").Put<uint32_t>(9);
  for (int i = 0; i < 20; ++i) deep.Put<uint32_t>(9).Put<uint64_t>(1);
  deep.Put<uint32_t>(4).Put<uint64_t>(0);
  ExpectError(deep.b, {"nested deeper"});
  ExpectError(Bytes()
                  .Header(0, 2)
                  .Str("k")
                  .Put<uint32_t>(0)
                  .Put<uint8_t>(1)
                  .Str("k")
                  .Put<uint32_t>(0)
                  .Put<uint8_t>(2)
                  .b,
              {"duplicate key", "'k'"});
  ExpectError(Bytes().Header(0, 1).Str("general.alignment").Put<uint32_t>(4).Put<uint32_t>(48).b,
              {"general.alignment", "power of two"});
  ExpectError(Bytes().Header(0, 1).Str("general.alignment").Put<uint32_t>(8).Str("32").b,
              {"general.alignment", "string"});
  ExpectError(Bytes().Header(0, 1).Str("").Put<uint32_t>(0).Put<uint8_t>(1).b, {"empty key"});
}

TEST(GgufValidation, TensorErrors) {
  auto one = [](std::vector<int64_t> ne, uint32_t type, uint64_t offset, size_t data) {
    Bytes b;
    b.Header(1, 0).Tensor("w", std::move(ne), type, offset).PadTo(32).Zeros(data);
    return b.b;
  };
  EXPECT_EQ(TryParse(one({32, 2}, 8, 0, 68)), "");
  ExpectError(one({32, 2}, 8, 0, 67), {"tensor 'w'", "runs past the end"});
  ExpectError(one({32, 2}, 8, 32, 68), {"tensor 'w'", "runs past"});
  ExpectError(one({32, 2}, 8, 4, 200), {"tensor 'w'", "not a multiple of the alignment"});
  ExpectError(one({33}, 8, 0, 64), {"tensor 'w'", "block size"});
  ExpectError(one({32}, 4, 0, 64), {"tensor 'w'", "type id 4"});
  ExpectError(one({256}, 16, 0, 256), {"IQ2_XXS", "not supported"});
  ExpectError(one({-1}, 0, 0, 64), {"ne[0] is -1"});
  ExpectError(one({1ll << 40, 1ll << 40}, 0, 0, 64), {"overflow"});
  // No elements, but 2^80 rows (TensorInfo::n_rows() would overflow).
  ExpectError(one({0, 1ll << 40, 1ll << 40}, 0, 0, 64), {"row count overflows"});
  ExpectError(one({1ll << 31, 1ll << 30, 2}, 0, 0, 64), {"byte size overflows"});
  ExpectError(one({1ll << 40, 1ll << 20, 1}, 0, 0, 64), {"runs past"});
  Bytes b5;
  b5.Header(1, 0).Str("w").Put<uint32_t>(5).Zeros(64);
  ExpectError(b5.b, {"n_dims is 5"});
  Bytes dup;
  dup.Header(2, 0).Tensor("w", {8}, 0, 0).Tensor("w", {8}, 0, 32).PadTo(32).Zeros(64);
  ExpectError(dup.b, {"duplicate tensor name", "'w'"});
  Bytes overlap;
  overlap.Header(2, 0).Tensor("a", {16}, 0, 0).Tensor("b", {16}, 0, 64).PadTo(32).Zeros(128);
  EXPECT_EQ(TryParse(overlap.b), "");
  Bytes overlap2;
  overlap2.Header(2, 0).Tensor("a", {16}, 0, 0).Tensor("b", {8}, 0, 32).PadTo(32).Zeros(96);
  // a is 64 bytes at [0,64), b at [32,64): overlap.
  ExpectError(overlap2.b, {"tensor 'b'", "overlaps tensor 'a'"});
  Bytes empty;
  empty.Header(1, 0).Str("").Zeros(64);
  ExpectError(empty.b, {"empty tensor name"});
}

TEST(GgufValidation, HostileInputStaysWithinMemoryBound) {
  // Arrays of many tiny elements are the worst case for heap per file byte.
  std::vector<std::vector<std::byte>> inputs;
  {
    Bytes b;  // 1M empty strings
    b.Header(0, 1).Str("k").Put<uint32_t>(9).Put<uint32_t>(8).Put<uint64_t>(1 << 20);
    b.Zeros(8u << 20);
    inputs.push_back(b.b);
  }
  {
    Bytes b;  // 500k empty nested arrays
    b.Header(0, 1).Str("k").Put<uint32_t>(9).Put<uint32_t>(9).Put<uint64_t>(500000);
    for (int i = 0; i < 500000; ++i) b.Put<uint32_t>(8).Put<uint64_t>(1).Put<uint64_t>(0);
    inputs.push_back(b.b);
  }
  {
    Bytes b;  // 300k tiny tensors
    b.Header(300000, 0);
    for (int i = 0; i < 300000; ++i) b.Tensor(std::to_string(i), {1}, 24, 0);
    inputs.push_back(b.b);
  }
  for (const auto& in : inputs) {
    const int64_t before = g_live_bytes.load();
    g_peak_bytes.store(before);
    TryParse(in);
    const int64_t peak = g_peak_bytes.load() - before;
    std::printf("hostile file of %zu bytes: parser peak heap %lld bytes (%.2fx)\n", in.size(),
                static_cast<long long>(peak), static_cast<double>(peak) / in.size());
    EXPECT_LT(peak, static_cast<int64_t>(8 * in.size() + (2 << 20)))
        << "file of " << in.size() << " bytes";
  }
}

}  // namespace
}  // namespace crossword::gguf
