// Subcommands implemented in the cli folder (they use the engine).
#pragma once

#include <CLI/CLI.hpp>

namespace crossword::cli {

/// `crossword run`.
void RegisterRunCommand(CLI::App& app);
/// `crossword check`.
void RegisterCheckCommand(CLI::App& app);
/// `crossword serve` (flags as llama-server's where they exist; docs/server.md).
void RegisterServeCommand(CLI::App& app);
/// `crossword logits`.
void RegisterLogitsCommand(CLI::App& app);

}  // namespace crossword::cli
