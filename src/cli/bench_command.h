// `crossword bench`: llama-bench-like speed measurement (see bench_command.cc,
// docs/performance.md).
#pragma once

#include <CLI/CLI.hpp>

namespace crossword::cli {

/// Registers `crossword bench` (-m MODEL -p 512 -n 128 -t 2 -r 5 [--passes]).
void RegisterBenchCommand(CLI::App& app);

}  // namespace crossword::cli
