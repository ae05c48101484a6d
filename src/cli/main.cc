// crossword: the command-line entry point. Each library registers its own subcommands here.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "base/error.h"
#include "chat/chat_commands.h"
#include "cli/bench_command.h"
#include "cli/commands.h"
#include "cli/llama_flags.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer_commands.h"
#include "tools/gguf_commands.h"
#include "tools/serve_bench_command.h"

int main(int argc, char** argv) {
  CLI::App app{
      "crossword: inference engine for block-diffusion language models (Clover, qwen35moe)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "crossword 0.1.0");
  // Subcommand registration (one call per contributing library).
  crossword::cli::RegisterRunCommand(app);
  crossword::cli::RegisterLogitsCommand(app);
  crossword::cli::RegisterBenchCommand(app);
  crossword::tools::RegisterBenchServeCommand(*app.get_subcommand("bench"));
  crossword::cli::RegisterCheckCommand(app);
  // The libraries beside the engine get the embedded model as bytes (they do not link it).
  crossword::tokenizer::RegisterTokenizerCommands(app, crossword::engine::EmbeddedModel());
  crossword::chat::RegisterChatCommands(app, crossword::engine::EmbeddedModel());
  crossword::tools::RegisterGgufCommands(app);
  crossword::cli::RegisterServeCommand(app);
  crossword::cli::ReadIntegersAsDecimal(app);

  // CLI11 reports an unknown command as a missing one; name it and list the real ones.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string name = argv[1];
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      known = known || sub->get_name() == name;
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "crossword: error: unknown command '%s'; commands: %s\n", name.c_str(),
                   names.c_str());
      return 2;
    }
  }
  // llama.cpp's multi-letter short flags (-ngl, -ctk, -fa, ...) are read whole: they become their
  // long names before CLI11, which would bundle them (-ctk as -c tk); -hf and the like are refused.
  std::vector<std::string> args;
  try {
    args = crossword::cli::NormalizeLlamaArgs(app, std::vector<std::string>(argv + 1, argv + argc));
  } catch (const crossword::Error& e) {
    std::fprintf(stderr, "crossword: error: %s\n", e.what());
    return 2;
  }
  std::vector<char*> arg_ptrs{argv[0]};
  for (std::string& a : args) arg_ptrs.push_back(a.data());
  try {
    app.parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // a command's own exit code (run: 130 after Ctrl-C)
  } catch (const CLI::ParseError& e) {
    // --help / --version: CLI11 prints them and exits 0. Usage errors are said in crossword's own
    // words ("crossword: error: ...", as every other error) and exit 2.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::fprintf(stderr, "crossword: error: %s\nRun with --help for more information.\n", e.what());
    return 2;
  } catch (const crossword::Error& e) {
    std::fprintf(stderr, "crossword: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crossword: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
