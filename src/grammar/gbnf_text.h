// Helpers for writing GBNF text (used by the JSON Schema compiler and by callers that assemble
// grammars, such as the tool-call grammar of the engine).
#pragma once

#include <string>
#include <string_view>

namespace crossword::grammar {

/// `"..."`: a GBNF string literal matching exactly the bytes of `text` (valid UTF-8).
std::string GbnfLiteral(std::string_view text);

/// A GBNF expression for every string (of code points) that does not contain `word`. `word`
/// must be non-empty valid UTF-8 whose first character occurs nowhere else in it (so that the
/// matching automaton restarts only at that character), e.g. "<tool_call>" or "\n</parameter>";
/// throws crossword::Error otherwise. Regular: no recursion, so it compiles to a few DFA states.
std::string GbnfNotContaining(std::string_view word);

}  // namespace crossword::grammar
