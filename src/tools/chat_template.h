// The chat template that `gguf synth` writes as tokenizer.chat_template:
// assets/chat_template.jinja, embedded at build time (see src/tools/CMakeLists.txt).
#pragma once

#include <string_view>

namespace crossword::tools {

/// The text of assets/chat_template.jinja as it was when crossword was built.
std::string_view ChatTemplateSource();

}  // namespace crossword::tools
