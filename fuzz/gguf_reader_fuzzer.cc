// libFuzzer target for the GGUF reader: any input must parse or throw crossword::Error, never
// crash, leak, read out of bounds or throw anything else. Everything parsed is touched.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/error.h"
#include "core/quant.h"
#include "gguf/gguf.h"
#include "tools/clover_layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace crossword;
  try {
    const gguf::File f = gguf::File::Parse(std::as_bytes(std::span(data, size)));
    size_t sink = 0;
    for (const gguf::KeyValue& kv : f.metadata()) {
      sink += kv.value.ToString(16, 64).size();
      if (auto s = kv.value.StringArray()) sink += s->size();
      if (auto v = kv.value.Int32Array()) sink += v->size();
      if (auto v = kv.value.Float32Array()) sink += v->size();
      if (kv.value.is_array() && kv.value.array_size() > 0)
        sink += kv.value.At(0).ToString().size();
    }
    (void)f.GetString("general.architecture");
    std::vector<float> row;
    for (const gguf::TensorInfo& t : f.tensors()) {
      // Decode the first block of every tensor: the dequantizers see arbitrary bytes.
      const int64_t block = GetTypeTraits(t.type).block_size;
      if (t.nbytes > 0 && CanDequantize(t.type) && t.ne[0] >= block) {
        row.resize(static_cast<size_t>(block));
        DequantizeRow(t.type, t.data, row.data(), block);
        sink += row[0] == 0.0f;
      }
      sink += f.FindTensor(t.name) == &t;
    }
    sink += tools::ExamineLayout(f).verdict.size();
    if (sink == 1) return 0;  // keep the work observable
  } catch (const Error&) {
  }
  return 0;
}
