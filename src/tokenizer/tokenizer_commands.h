// CLI subcommands of the tokenizer library: `crossword tokenize` and `crossword tokenizer ...`.
#pragma once

#include <cstddef>
#include <span>

namespace CLI {
class App;
}  // namespace CLI

namespace crossword::tokenizer {

/// Registers:
///   crossword tokenize [-m MODEL] (-p TEXT | -f FILE) [--special] [--pieces]
///       prints the ids as a JSON array (with --pieces: [[id, "text"], ...]).
///   crossword tokenizer convert-hf TOKENIZER_JSON [--config TOKENIZER_CONFIG_JSON] -o OUT.gguf
///       [--pad-to N] [--arch NAME] [--name NAME]
///       writes a vocabulary-only GGUF from a Hugging Face tokenizer.json.
///   crossword tokenizer bench [-m MODEL] -f FILE [--repeat N]
///       single-thread encode speed in MB/s (cold piece cache, then warm).
/// `default_model` (GGUF bytes that outlive the app, may be empty) is the model of `tokenize`
/// and `tokenizer bench` when -m is not given.
/// Errors surface as crossword::Error (main prints them and exits 2).
void RegisterTokenizerCommands(CLI::App& app, std::span<const std::byte> default_model = {});

}  // namespace crossword::tokenizer
