// llama.cpp command lines as crossword reads them: the multi-letter short spellings (-ngl, -ctk,
// -fa, ...) rewritten to their long names before CLI11 parses (CLI11 would bundle `-ctk` into
// `-c tk`), llama.cpp flags that crossword refuses (-hf: no downloads), and the flags accepted for
// llama.cpp's sake that change nothing here (one note each at start-up). The flags with a meaning
// here are in the registry, cli/common.h.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "cli/common.h"

namespace crossword::cli {

/// Rewrites the arguments after the program name: each llama.cpp multi-letter short flag in a
/// flag position (not the value of the option before it) becomes its long name (`-ctk q8_0` ->
/// `--cache-type-k q8_0`, `-ngl=99` -> `--n-gpu-layers=99`). `app` is the whole CLI (the
/// subcommand named in `args` decides which options take a value). Throws crossword::Error (exit
/// 2) on a flag crossword refuses, naming it and why, and on a multi-letter short flag that is
/// neither llama.cpp's nor crossword's ("unknown flag '-xyz'"), which CLI11 would otherwise
/// read as bundled one-letter flags.
std::vector<std::string> NormalizeLlamaArgs(const CLI::App& app, std::vector<std::string> args);

/// Makes every integer option of `app` and its subcommands (CLI11 type name INT or UINT) read a
/// value with leading zeros as decimal, as llama.cpp's std::stoi does: CLI11 2.1 reads `-c 010` as
/// octal 8 and refuses `-n 08`. Call after every option is registered.
void ReadIntegersAsDecimal(CLI::App& app);

/// Registers on `cmd` the llama.cpp flags of `command` that are accepted without effect: given,
/// each adds one line to `notes` (or none where crossword always does what the flag asks, e.g.
/// --jinja, --metrics, --cont-batching).
void AddNoEffectFlags(CLI::App* cmd, Command command, std::shared_ptr<FlagNotes> notes);

}  // namespace crossword::cli
