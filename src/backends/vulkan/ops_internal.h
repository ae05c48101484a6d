// Helpers shared by the op implementations (not part of the op API).
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>

#include "backends/vulkan/commands.h"
#include "backends/vulkan/memory.h"
#include "base/error.h"
#include "core/types.h"

namespace crossword::vulkan::internal {

/// Lower-case type name as in the shader variant names ("q4_0", "bf16").
std::string TypeTag(GgmlType type);

/// The first `bytes` of v; throws crossword::Error naming the op and the argument when v is
/// missing or too small.
BufferView Need(BufferView v, uint64_t bytes, std::string_view op, std::string_view what);
/// As Need, but an invalid view stays invalid (optional arguments).
BufferView Optional(BufferView v, uint64_t bytes, std::string_view op, std::string_view what);

/// Bytes of `rows` rows of `row_elems` elements at stride ld (elements of elem_bytes).
inline uint64_t RowsBytes(int64_t rows, int64_t ld, int64_t row_elems, uint64_t elem_bytes) {
  if (rows <= 0) return 0;
  return (static_cast<uint64_t>(rows - 1) * static_cast<uint64_t>(ld) +
          static_cast<uint64_t>(row_elems)) *
         elem_bytes;
}

/// Checked conversion of a shape value into a push-constant word.
uint32_t U32(int64_t v, std::string_view op, std::string_view what);
inline uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
inline uint32_t DynWord(DynInt d) { return static_cast<uint32_t>(d.value); }
inline uint32_t SlotWord(DynInt d) { return static_cast<uint32_t>(d.slot); }

/// Splits `total` workgroups over x and z (x <= 65535): the shader's group index is
/// x + z * gx.
void WrapGroups(uint64_t total, uint32_t* gx, uint32_t* gz);

/// Variant name: base + "_" + suffix parts, then the recording's reduction suffix.
std::string Variant(const CommandList& cl, std::string_view base);

}  // namespace crossword::vulkan::internal
