// The SPIR-V of every shader variant, embedded at build time (see CMakeLists.txt).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace crossword::vulkan {

struct ShaderBlob {
  const char* name;  ///< variant name, e.g. "mmv_q4_0_i8_sg"
  const uint32_t* code;
  size_t words;
};

/// All embedded variants (generated shader_table.cc).
std::span<const ShaderBlob> ShaderTable();
/// The SPIR-V of variant `name`, or an empty span.
std::span<const uint32_t> FindShader(std::string_view name);

}  // namespace crossword::vulkan
