// SynthWeights: weights generated on the device for speed tests (ops.h).
#include "backends/vulkan/ops.h"
#include "backends/vulkan/ops_internal.h"

namespace crossword::vulkan {

using namespace internal;

void SynthWeights(CommandList& cl, GgmlType type, BufferView v, uint32_t seed) {
  constexpr std::string_view op = "SynthWeights";
  Check(v.valid() && v.size % 2 == 0, "vulkan {}: needs a view of whole 16-bit units", op);
  // Block size in halves and the half index of d (and dmin) per quantized type.
  uint32_t mode = 0, block_halves = 0, scale_at = 0, second_at = 0xffffffffu;
  switch (type) {
    case GgmlType::kF32:
      mode = 1;
      break;
    case GgmlType::kF16:
      mode = 2;
      break;
    case GgmlType::kBF16:
      mode = 3;
      break;
    case GgmlType::kQ4_0:
      block_halves = 9;
      break;
    case GgmlType::kQ8_0:
      block_halves = 17;
      break;
    case GgmlType::kQ4_K:
      block_halves = 72, second_at = 1;
      break;
    case GgmlType::kQ5_K:
      block_halves = 88, second_at = 1;
      break;
    case GgmlType::kQ6_K:
      block_halves = 105, scale_at = 104;
      break;
    default:
      Fail("vulkan {}: no generator for {}", op, TypeName(type));
  }
  const uint32_t wg = 256;
  const uint32_t spec[] = {wg, cl.device().info().subgroup_size};
  const uint64_t words = v.size / 4;
  if (words > 0) {
    uint32_t gx, gz;
    WrapGroups((words + wg - 1) / wg, &gx, &gz);
    const Binding bind[] = {{v.Sub(0, words * 4), Access::kWrite, 4}, {}};
    const uint32_t push[] = {U32(words, op, "words"), mode, seed, 0, 0, 0, gx};
    cl.Dispatch("synth_weights", spec, bind, push, gx, 1, gz);
  }
  if (block_halves == 0) return;
  const uint64_t blocks = v.size / 2 / block_halves;
  uint32_t gx, gz;
  WrapGroups((blocks + wg - 1) / wg, &gx, &gz);
  const Binding bind[] = {{}, {v.Sub(0, blocks * block_halves * 2), Access::kWrite, 2}};
  const uint32_t push[] = {
      U32(blocks, op, "blocks"), 4, seed, block_halves, scale_at, second_at, gx};
  cl.Dispatch("synth_weights", spec, bind, push, gx, 1, gz);
}

}  // namespace crossword::vulkan
