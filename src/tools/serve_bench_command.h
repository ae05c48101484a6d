// `crossword bench serve`: registration under the `bench` command (see serve_bench.h).
#pragma once

#include <CLI/CLI.hpp>

namespace crossword::tools {

/// Adds the `serve` subcommand to `bench` (the `crossword bench` command).
void RegisterBenchServeCommand(CLI::App& bench);

}  // namespace crossword::tools
