// `crossword serve`: registers the subcommand with the CLI.
#pragma once

#include <CLI/CLI.hpp>

namespace crossword::server {

/// Adds `crossword serve` (flags as llama-server's where they exist; docs/server.md).
void RegisterServerCommands(CLI::App& app);

}  // namespace crossword::server
