// Private to src/gguf: the shared, immutable payload behind string/array Values.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace crossword::gguf::internal {

/// Owned data of a Value (only what cannot be a view into a file mapping).
struct ValueStorage {
  std::string text;                        ///< owned string value
  std::vector<std::byte> bytes;            ///< owned packed payload of a fixed-size array
  std::vector<std::string> owned_strings;  ///< owned elements of a string array
  std::vector<std::string_view> strings;   ///< elements of a string array (views)
  std::vector<Value> items;                ///< items of a nested array (or kept-alive sources)

  /// A scalar Value of `type` from its bits (see LoadScalarBits).
  static Value Scalar(ValueType type, uint64_t bits);
  /// The stored bits of a scalar Value.
  static uint64_t Bits(const Value& v) { return v.bits_; }
};

/// Reads one packed little-endian element of fixed-size `type` at `p` as 64 bits: sign-extended
/// for signed integers, zero-extended otherwise (float bits unchanged).
uint64_t LoadScalarBits(ValueType type, const std::byte* p);

}  // namespace crossword::gguf::internal
