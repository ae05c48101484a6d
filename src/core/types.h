// GGML tensor element types as stored in GGUF files: ids, names, block sizes and byte sizes.
// Ids and layouts follow the published GGUF specification (ggml/docs/gguf.md, ggml-common.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace crossword {

/// GGUF tensor type ids (the uint32 stored in each tensor info). Values are fixed by the format.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

/// Static facts about one type: `block_size` elements are stored in `type_size` bytes.
struct TypeTraits {
  GgmlType type;
  std::string_view name;  ///< GGUF/llama.cpp spelling: "F32", "Q4_K", "BF16", ...
  int64_t block_size;  ///< elements per block (1 for plain types, 32 for Q*_0/1, 256 for K-quants)
  int64_t type_size;   ///< bytes per block
  bool is_quantized;
};

/// Traits of a known type, or std::nullopt for an id crossword does not support.
std::optional<TypeTraits> FindTypeTraits(uint32_t type_id);
/// Traits of a known type (never fails for enum values declared above).
const TypeTraits& GetTypeTraits(GgmlType type);
/// Parses a name such as "Q4_0" or "q8_0" (case-insensitive). std::nullopt if unknown.
std::optional<GgmlType> ParseTypeName(std::string_view name);
inline std::string_view TypeName(GgmlType type) { return GetTypeTraits(type).name; }

/// Bytes of one row of `n` elements, or std::nullopt if `n` is not a multiple of the block size
/// or the product overflows.
std::optional<uint64_t> RowBytes(GgmlType type, int64_t n);

}  // namespace crossword
