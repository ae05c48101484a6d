// crossword: the command-line entry point. Each library registers its own subcommands here.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "base/error.h"
#include "chat/chat_commands.h"
#include "cli/bench_command.h"
#include "cli/commands.h"
#include "server/server_commands.h"
#include "tokenizer/tokenizer_commands.h"
#include "tools/gguf_commands.h"

int main(int argc, char** argv) {
  CLI::App app{"crossword: inference engine for block-diffusion language models (Clover, qwen35moe)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "crossword 0.1.0");
  // Subcommand registration (one call per contributing library).
  crossword::cli::RegisterRunCommand(app);
  crossword::cli::RegisterLogitsCommand(app);
  crossword::cli::RegisterBenchCommand(app);
  crossword::cli::RegisterCheckCommand(app);
  crossword::tokenizer::RegisterTokenizerCommands(app);
  crossword::chat::RegisterChatCommands(app);
  crossword::tools::RegisterGgufCommands(app);
  crossword::server::RegisterServerCommands(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const crossword::Error& e) {
    std::fprintf(stderr, "crossword: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crossword: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
