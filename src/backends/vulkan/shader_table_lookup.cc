// Name lookup in the generated table of embedded SPIR-V.
#include "backends/vulkan/shader_table.h"

namespace crossword::vulkan {

std::span<const uint32_t> FindShader(std::string_view name) {
  for (const ShaderBlob& b : ShaderTable()) {
    if (name == b.name) return {b.code, b.words};
  }
  return {};
}

}  // namespace crossword::vulkan
