// Registers `crossword gguf inspect | synth | patch` with the CLI.
#pragma once

namespace CLI {
class App;
}  // namespace CLI

namespace crossword::tools {

/// Adds the `gguf` subcommand group to `app`. Errors surface as crossword::Error (exit 2 in main).
void RegisterGgufCommands(CLI::App& app);

}  // namespace crossword::tools
