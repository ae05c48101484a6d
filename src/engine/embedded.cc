// Access to the default model linked into the binary (see CMakeLists.txt: .incbin).
#include <cstddef>
#include <span>

#include "engine/engine.h"

#if CROSSWORD_HAS_EMBEDDED_MODEL
extern "C" const std::byte crossword_embedded_model_begin[];
extern "C" const std::byte crossword_embedded_model_end[];
#endif

namespace crossword::engine {

std::span<const std::byte> EmbeddedModel() {
#if CROSSWORD_HAS_EMBEDDED_MODEL
  return {crossword_embedded_model_begin,
          static_cast<size_t>(crossword_embedded_model_end - crossword_embedded_model_begin)};
#else
  return {};
#endif
}

}  // namespace crossword::engine
