// Writes the seed corpus for gguf_reader_fuzzer into DIR: a file with every metadata value type
// and every tensor type, and the tiny synthesized models (both layouts, several tensor types)
// with each tensor cut to one block, so the real vocabulary, chat template and tensor names are
// in the corpus while every seed stays small.
#include <cstdio>
#include <string>
#include <vector>

#include "base/error.h"
#include "gguf/gguf.h"
#include "tools/synth.h"

namespace {

using namespace crossword;

void Shrink(const std::string& in, const std::string& out) {
  const gguf::File f = gguf::File::Open(in);
  gguf::Writer w(out);
  for (const gguf::KeyValue& kv : f.metadata()) w.AddKeyValue(std::string(kv.key), kv.value);
  std::vector<std::vector<std::byte>> data;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const int64_t block = GetTypeTraits(t.type).block_size;
    const int64_t ne[2] = {block, t.n_dims > 1 ? 2 : 1};
    w.AddTensor(t.name, t.type, std::span<const int64_t>(ne, t.n_dims > 1 ? 2 : 1));
    data.emplace_back(t.data, t.data + GetTypeTraits(t.type).type_size * ne[1]);
  }
  for (const auto& d : data) w.WriteTensorData(d);
  w.Finish();
}

void AllTypes(const std::string& out) {
  gguf::Writer w(out);
  const int32_t i32[] = {11, 11, 10, 0};
  const float f32[] = {0.5f, -1.0f};
  w.AddKeyValue("general.architecture", gguf::Value::String("qwen35moe"));
  w.AddKeyValue("general.alignment", gguf::Value::Uint32(64));
  w.AddKeyValue("a.u8", gguf::Value::Uint8(1));
  w.AddKeyValue("a.i8", gguf::Value::Int8(-1));
  w.AddKeyValue("a.u16", gguf::Value::Uint16(2));
  w.AddKeyValue("a.i16", gguf::Value::Int16(-2));
  w.AddKeyValue("a.u32", gguf::Value::Uint32(3));
  w.AddKeyValue("a.i32", gguf::Value::Int32(-3));
  w.AddKeyValue("a.f32", gguf::Value::Float32(0.95f));
  w.AddKeyValue("a.bool", gguf::Value::Bool(true));
  w.AddKeyValue("a.str", gguf::Value::String("<|im_start|>"));
  w.AddKeyValue("a.u64", gguf::Value::Uint64(4));
  w.AddKeyValue("a.i64", gguf::Value::Int64(-4));
  w.AddKeyValue("a.f64", gguf::Value::Float64(1e-6));
  w.AddKeyValue("a.sections", gguf::Value::Int32s(i32));
  w.AddKeyValue("a.scores", gguf::Value::Float32s(f32));
  w.AddKeyValue("a.tokens", gguf::Value::Strings({"a", "Ġb", ""}));
  w.AddKeyValue("a.nested",
                gguf::Value::Array(gguf::ValueType::kArray,
                                   {gguf::Value::Int32s(i32), gguf::Value::Strings({"x"})}));
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
                            GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
                            GgmlType::kQ8_1, GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K,
                            GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_K, GgmlType::kI8,
                            GgmlType::kI16,  GgmlType::kI32,  GgmlType::kI64,  GgmlType::kF64};
  std::vector<uint64_t> sizes;
  for (GgmlType t : types) {
    const int64_t ne[1] = {GetTypeTraits(t).block_size};
    sizes.push_back(w.AddTensor("t." + std::string(TypeName(t)), t, ne));
  }
  for (uint64_t n : sizes) w.WriteTensorData(std::vector<std::byte>(n, std::byte{0x3c}));
  w.Finish();
}

// A Clover-family file whose ssm_a has zero elements: legal GGUF, with no tensor bytes, so the
// layout check's dequantization sees a null data pointer (a fuzzer finding, kept as a seed).
void ZeroElements(const std::string& out) {
  gguf::Writer w(out);
  w.AddKeyValue("general.architecture", gguf::Value::String("qwen35moe"));
  const int64_t ne[1] = {0};
  w.AddTensor("blk.0.ssm_a", GgmlType::kF32, ne);
  w.WriteTensorData(std::vector<std::byte>());
  w.Finish();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gguf_fuzz_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  try {
    AllTypes(dir + "/all_types.gguf");
    ZeroElements(dir + "/zero_elements.gguf");
    for (const char* layout : {"official", "upstream"}) {
      for (const char* type : {"F32", "Q4_0", "Q4_K_M"}) {
        tools::SynthOptions o;
        o.preset = "tiny";
        o.layers = 4;
        o.layout = layout;
        o.type = type;
        o.output = dir + "/full.tmp";
        tools::Synthesize(o, Logger::Silent());
        Shrink(o.output, dir + "/tiny_" + layout + "_" + type + ".gguf");
        std::remove(o.output.c_str());
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "gguf_fuzz_seeds: %s\n", e.what());
    return 2;
  }
  return 0;
}
