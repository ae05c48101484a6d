// Type table for GgmlType.
#include "core/types.h"

#include <array>
#include <cctype>

#include "core/quant_blocks.h"

namespace crossword {
namespace {

constexpr std::array<TypeTraits, 20> kTraits = {{
    {GgmlType::kF32, "F32", 1, 4, false},
    {GgmlType::kF16, "F16", 1, 2, false},
    {GgmlType::kQ4_0, "Q4_0", kQK4_0, sizeof(BlockQ4_0), true},
    {GgmlType::kQ4_1, "Q4_1", kQK4_1, sizeof(BlockQ4_1), true},
    {GgmlType::kQ5_0, "Q5_0", kQK5_0, sizeof(BlockQ5_0), true},
    {GgmlType::kQ5_1, "Q5_1", kQK5_1, sizeof(BlockQ5_1), true},
    {GgmlType::kQ8_0, "Q8_0", kQK8_0, sizeof(BlockQ8_0), true},
    {GgmlType::kQ8_1, "Q8_1", kQK8_1, sizeof(BlockQ8_1), true},
    {GgmlType::kQ2_K, "Q2_K", kQK_K, sizeof(BlockQ2_K), true},
    {GgmlType::kQ3_K, "Q3_K", kQK_K, sizeof(BlockQ3_K), true},
    {GgmlType::kQ4_K, "Q4_K", kQK_K, sizeof(BlockQ4_K), true},
    {GgmlType::kQ5_K, "Q5_K", kQK_K, sizeof(BlockQ5_K), true},
    {GgmlType::kQ6_K, "Q6_K", kQK_K, sizeof(BlockQ6_K), true},
    {GgmlType::kQ8_K, "Q8_K", kQK_K, sizeof(BlockQ8_K), true},
    {GgmlType::kI8, "I8", 1, 1, false},
    {GgmlType::kI16, "I16", 1, 2, false},
    {GgmlType::kI32, "I32", 1, 4, false},
    {GgmlType::kI64, "I64", 1, 8, false},
    {GgmlType::kF64, "F64", 1, 8, false},
    {GgmlType::kBF16, "BF16", 1, 2, false},
}};

}  // namespace

std::optional<TypeTraits> FindTypeTraits(uint32_t type_id) {
  for (const auto& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == type_id) return t;
  }
  return std::nullopt;
}

const TypeTraits& GetTypeTraits(GgmlType type) {
  for (const auto& t : kTraits) {
    if (t.type == type) return t;
  }
  return kTraits[0];  // unreachable for declared enum values
}

std::optional<GgmlType> ParseTypeName(std::string_view name) {
  for (const auto& t : kTraits) {
    if (t.name.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < name.size() && eq; ++i) {
      eq = std::toupper(static_cast<unsigned char>(name[i])) == t.name[i];
    }
    if (eq) return t.type;
  }
  return std::nullopt;
}

std::optional<uint64_t> RowBytes(GgmlType type, int64_t n) {
  const TypeTraits& t = GetTypeTraits(type);
  if (n < 0 || n % t.block_size != 0) return std::nullopt;
  const uint64_t blocks = static_cast<uint64_t>(n / t.block_size);
  uint64_t bytes;
  if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(t.type_size), &bytes))
    return std::nullopt;
  return bytes;
}

}  // namespace crossword
