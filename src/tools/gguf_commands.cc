// CLI wiring of `crossword gguf inspect | synth | patch`.
#include "tools/gguf_commands.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/log.h"
#include "gguf/gguf.h"
#include "tools/inspect.h"
#include "tools/patch.h"
#include "tools/synth.h"

namespace crossword::tools {

void RegisterGgufCommands(CLI::App& app) {
  CLI::App* gguf = app.add_subcommand("gguf", "inspect, synthesize and patch GGUF files");
  gguf->require_subcommand(1);

  // inspect
  struct InspectArgs {
    std::string file;
    bool json = false;
  };
  auto ia = std::make_shared<InspectArgs>();
  CLI::App* inspect = gguf->add_subcommand(
      "inspect", "Architecture, parameters, quant mix, layers, tensors and Clover layout verdict");
  inspect->add_option("FILE", ia->file, "GGUF file")->required();
  inspect->add_flag("--json", ia->json, "Print one JSON document instead of text");
  inspect->callback([ia] {
    const gguf::File f = gguf::File::Open(ia->file);
    const std::string out =
        ia->json
            ? InspectJson(f).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"
            : InspectText(f);
    std::fwrite(out.data(), 1, out.size(), stdout);
  });

  // synth
  auto so = std::make_shared<SynthOptions>();
  CLI::App* synth = gguf->add_subcommand(
      "synth", "Write a random-weight model with the exact structure of Clover-35B-A3B");
  synth->add_option("--preset", so->preset, "clover-35b-a3b | tiny")->capture_default_str();
  synth->add_option("--layers", so->layers, "Number of layers (default: the preset's)");
  synth->add_option("--type", so->type, "F32 | F16 | BF16 | Q8_0 | Q4_0 | Q4_K_M")
      ->capture_default_str();
  synth->add_option(
      "--layout", so->layout,
      "official | upstream (default: official for clover_moe, upstream for qwen35moe)");
  synth->add_option("--arch", so->arch, "clover_moe | qwen35moe")->capture_default_str();
  synth->add_option("--seed", so->seed, "Random seed")->capture_default_str();
  synth->add_option("--threads", so->threads, "Threads (default: all)");
  synth->add_option("-o,--output", so->output, "Output GGUF file (required unless --dry-run)");
  synth->add_flag("--dry-run", so->dry_run, "Plan the file and print its size; write nothing");
  synth->add_flag("--sparse", so->sparse,
                  "Write the header only: every tensor reads as zeros from a file hole (speed "
                  "tests whose weights are generated on the GPU; no disk space)");
  synth->callback([so] {
    so->progress = ::isatty(STDERR_FILENO);
    const Logger log(LogLevel::kInfo);
    const SynthSummary s = Synthesize(*so, log);
    if (so->dry_run) return;
    log.Info("synth: wrote {} ({} bytes, {} tensors) in {:.2f} s", so->output, s.file_size,
             s.n_tensors, s.seconds);
  });

  // patch
  auto po = std::make_shared<PatchOptions>();
  CLI::App* patch = gguf->add_subcommand(
      "patch", "Rewrite an official (fork) Clover GGUF into the upstream llama.cpp layout");
  patch->add_option("IN", po->input, "Official-layout GGUF file")->required();
  patch->add_option("OUT", po->output, "Output file (never the input)")->required();
  patch->callback([po] {
    po->progress = ::isatty(STDERR_FILENO);
    const Logger log(LogLevel::kInfo);
    const PatchResult r = PatchToUpstream(*po, log);
    if (r.nothing_to_do) {
      log.Info(
          "patch: '{}' already has the upstream layout: nothing to fix; copied it unchanged "
          "to '{}' ({} bytes)",
          po->input, po->output, r.bytes_written);
      return;
    }
    log.Info("patch: {} -> {}: {}key {}, dropped {} diffusion-only tensors, rewrote {} ssm_a",
             po->input, po->output, r.key_added ? "added " : "kept ",
             r.key_added ? "expert_shared_count = 1" : "expert_shared_count", r.tensors_dropped,
             r.ssm_a_rewritten);
    log.Info("patch: wrote {} bytes in {:.2f} s ({:.1f} MB/s)", r.bytes_written, r.seconds,
             r.seconds > 0 ? r.bytes_written / r.seconds * 1e-6 : 0.0);
  });
}

}  // namespace crossword::tools
