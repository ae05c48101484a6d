// llama.cpp command lines as crossword reads them (cli/llama_flags.h).
#include "cli/llama_flags.h"

#include <string_view>

#include "base/error.h"

namespace crossword::cli {
namespace {

struct Spelling {
  std::string_view short_name, long_name;
};

// llama.cpp's multi-letter short flags (common/arg.cpp, tools/llama-bench) and their long names.
constexpr Spelling kShortFlags[] = {
    {"-ngl", "--n-gpu-layers"},
    {"-ctk", "--cache-type-k"},
    {"-ctv", "--cache-type-v"},
    {"-fa", "--flash-attn"},
    {"-ub", "--ubatch-size"},
    {"-tb", "--threads-batch"},
    {"-np", "--parallel"},
    {"-kvu", "--kv-unified"},
    {"-fit", "--fit"},
    {"-cmoe", "--cpu-moe"},
    {"-ncmoe", "--n-cpu-moe"},
    {"-sm", "--split-mode"},
    {"-mg", "--main-gpu"},
    {"-ts", "--tensor-split"},
    {"-nkvo", "--no-kv-offload"},
    {"-ot", "--override-tensor"},
    {"-cb", "--cont-batching"},
    {"-nocb", "--no-cont-batching"},
    {"-to", "--timeout"},
    {"-sps", "--slot-prompt-similarity"},
    {"-cram", "--cache-ram"},
    {"-dt", "--defrag-thold"},
    {"-nr", "--no-repack"},
    {"-sys", "--system-prompt"},
    {"-cnv", "--conversation"},
    {"-no-cnv", "--no-conversation"},
    {"-st", "--single-turn"},
    {"-mli", "--multiline-input"},
    {"-jf", "--json-schema-file"},
    {"-hf", "--hf-repo"},
    {"-hfr", "--hf-repo"},
    {"-hff", "--hf-file"},
    {"-hft", "--hf-token"},
    {"-hfd", "--hf-repo-draft"},
    {"-hfrd", "--hf-repo-draft"},
    {"-hfv", "--hf-repo-v"},
    {"-hffv", "--hf-file-v"},
    {"-mu", "--model-url"},
    {"-dr", "--docker-repo"},
    {"-md", "--model-draft"},
    {"-ngld", "--n-gpu-layers-draft"},
    {"-cd", "--ctx-size-draft"},
    {"-td", "--threads-draft"},
    {"-tbd", "--threads-batch-draft"},
    {"-ctkd", "--cache-type-k-draft"},
    {"-ctvd", "--cache-type-v-draft"},
    {"-devd", "--device-draft"},
    {"-mm", "--mmproj"},
    {"-mmu", "--mmproj-url"},
};

struct Refusal {
  std::string_view long_name, why;
};

constexpr std::string_view kNoDownloads =
    "crossword does not download models: fetch the GGUF file yourself and pass it with -m FILE";
constexpr std::string_view kNoDraftModel =
    "crossword has no separate draft model: --mode spec drafts with the model itself";
constexpr std::string_view kOneShot =
    "crossword run answers one prompt and exits; use crossword serve (its chat page or the API) "
    "for a conversation";

// llama.cpp flags that would mislead if accepted: exit 2 with the reason.
constexpr Refusal kRefused[] = {
    {"--hf-repo", kNoDownloads},
    {"--hf-file", kNoDownloads},
    {"--hf-token", kNoDownloads},
    {"--hf-repo-draft", kNoDownloads},
    {"--hf-repo-v", kNoDownloads},
    {"--hf-file-v", kNoDownloads},
    {"--model-url", kNoDownloads},
    {"--docker-repo", kNoDownloads},
    {"--model-draft", kNoDraftModel},
    {"--n-gpu-layers-draft", kNoDraftModel},
    {"--ctx-size-draft", kNoDraftModel},
    {"--threads-draft", kNoDraftModel},
    {"--threads-batch-draft", kNoDraftModel},
    {"--cache-type-k-draft", kNoDraftModel},
    {"--cache-type-v-draft", kNoDraftModel},
    {"--device-draft", kNoDraftModel},
    {"--mmproj", "crossword runs text models only (no multimodal projector)"},
    {"--mmproj-url", "crossword runs text models only (no multimodal projector)"},
    {"--lora", "LoRA adapters are not supported"},
    {"--lora-scaled", "LoRA adapters are not supported"},
    {"--control-vector", "control vectors are not supported"},
    {"--embedding", "crossword serves no embeddings (/embedding, /v1/embeddings)"},
    {"--embeddings", "crossword serves no embeddings (/embedding, /v1/embeddings)"},
    {"--reranking", "crossword serves no reranking (/rerank)"},
    {"--rerank", "crossword serves no reranking (/rerank)"},
    {"--conversation", kOneShot},
    {"--interactive", kOneShot},
    {"--interactive-first", kOneShot},
    {"--multiline-input", kOneShot},
};

// `-` then letters (or '-') only, at least two of them: a multi-letter short flag (`-t8` is -t 8).
bool IsMultiLetterShort(std::string_view name) {
  if (name.size() < 3 || name[0] != '-' || name[1] == '-') return false;
  for (char c : name.substr(1)) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-')) return false;
  }
  return true;
}

}  // namespace

void ReadIntegersAsDecimal(CLI::App& app) {
  // "-010" -> "-10", "00" -> "0"; a base prefix (0x, 0b, 0o) is refused, as std::stoi would read
  // "0x10" as 0 where CLI11 alone reads 16; anything else that is not an optional sign and
  // decimal digits (a word, a fraction) is left for the option's own conversion and checks.
  auto decimal = [](const std::string& v) -> std::string {
    const size_t sign = !v.empty() && (v[0] == '-' || v[0] == '+') ? 1 : 0;
    if (v.size() <= sign + 1 || v[sign] != '0') return v;
    const char base = static_cast<char>(v[sign + 1] | 0x20);  // lower case
    if (base == 'x' || base == 'b' || base == 'o') {
      throw CLI::ValidationError("expects a decimal integer (got " + v + ")");
    }
    for (size_t i = sign; i < v.size(); ++i) {
      if (v[i] < '0' || v[i] > '9') return v;
    }
    const size_t first = v.find_first_not_of('0', sign);
    return v.substr(0, sign) + (first == std::string::npos ? "0" : v.substr(first));
  };
  for (CLI::Option* o : app.get_options()) {
    // "INT", "UINT", or with a check appended ("INT:NONNEGATIVE", "INT:INT in [0 - 16777216]").
    const std::string type = o->get_type_name();
    const std::string base = type.substr(0, type.find(':'));
    if (base == "INT" || base == "UINT") o->transform(decimal);
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    ReadIntegersAsDecimal(*sub);
}

std::vector<std::string> NormalizeLlamaArgs(const CLI::App& app, std::vector<std::string> args) {
  const CLI::App* cur = &app;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a == "--") break;  // the rest are values
    if (a.empty() || a[0] != '-' || a == "-") {
      const auto subs = cur->get_subcommands([&](const CLI::App* s) { return s->get_name() == a; });
      if (!subs.empty()) cur = subs.front();
      continue;
    }
    const size_t eq = a.find('=');
    std::string name = a.substr(0, eq);
    const std::string given = name;  // as typed, for the messages
    if (IsMultiLetterShort(name) && !cur->get_option_no_throw(name)) {
      bool found = false;
      for (const Spelling& s : kShortFlags) {
        if (name == s.short_name) {
          name = std::string(s.long_name);
          a = eq == std::string::npos ? name : name + a.substr(eq);
          found = true;
          break;
        }
      }
      if (!found) {
        Fail(
            "unknown flag '{}' (llama.cpp's multi-letter short flags are read whole; see "
            "crossword {} --help)",
            name, cur == &app ? "<command>" : cur->get_name());
      }
    }
    for (const Refusal& r : kRefused) {
      if (name == r.long_name) Fail("{} is not supported: {}", given, r.why);
    }
    // An option that takes a value and has none attached: the next argument is its value, even
    // when it starts with '-' (`--seed -1`, `-p -x`).
    const CLI::Option* opt = cur->get_option_no_throw(name);
    if (opt && opt->get_expected_max() > 0 && eq == std::string::npos) ++i;
  }
  return args;
}

void AddNoEffectFlags(CLI::App* cmd, Command command, std::shared_ptr<FlagNotes> notes) {
  const std::string group = "llama.cpp flags without effect here (a note at start-up)";
  // A flag that takes a value: `note` gets the flag and value ("" : crossword always does this).
  auto value = [&](const std::string& names, const std::string& help,
                   std::function<std::string(const std::string&)> note) {
    cmd->add_option_function<std::string>(
           names,
           [notes, note, flag = names.substr(names.rfind(',') + 1)](const std::string& v) {
             const std::string why = note(v);
             if (!why.empty()) notes->Add(fmt::format("{} {}: no effect: {}", flag, v, why));
           },
           help)
        ->group(group);
  };
  auto flag = [&](const std::string& names, const std::string& help, const std::string& why) {
    cmd->add_flag_function(
           names,
           [notes, why, flag = names.substr(names.rfind(',') + 1)](int64_t) {
             if (!why.empty()) notes->Add(fmt::format("{}: no effect: {}", flag, why));
           },
           help)
        ->group(group);
  };
  auto always = [](std::string why) { return [why](const std::string&) { return why; }; };
  if (command & (kRun | kServe | kBench)) {
    value("--flash-attn", "llama.cpp's flash-attention switch (also -fa); one attention path here",
          always("crossword has one attention path per executor (no flash-attention switch)"));
    value("--fit", "llama.cpp's fit-to-memory (also -fit); off here", [](const std::string& v) {
      return v == "off" || v == "0" || v == "false"
                 ? std::string()
                 : std::string("crossword does not shrink -c or -ngl to fit device memory");
    });
    value("--n-cpu-moe", "llama.cpp's expert layers kept on the CPU (also -ncmoe)",
          always("expert weights run where their layer runs (-ngl and --device decide)"));
    flag("--cpu-moe", "llama.cpp's experts kept on the CPU (also -cmoe)",
         "expert weights run where their layer runs (-ngl and --device decide)");
    value("--split-mode", "llama.cpp's multi-GPU split (also -sm)",
          always("crossword runs on one device"));
    value("--main-gpu", "llama.cpp's main GPU (also -mg)", always("crossword runs on one device"));
    value("--tensor-split", "llama.cpp's multi-GPU split (also -ts)",
          always("crossword runs on one device"));
    value("--override-tensor", "llama.cpp's tensor placement (also -ot)",
          always("tensors are placed by -ngl and --device only"));
    flag("--no-kv-offload", "llama.cpp's KV cache on the host (also -nkvo)",
         "the KV cache lives with its layer's executor");
    value("--numa", "llama.cpp's NUMA placement", always("threads are not NUMA-placed"));
    value("--defrag-thold", "llama.cpp's KV defragmentation threshold (also -dt)",
          always("the KV cache of a slot is contiguous"));
  }
  if (command & (kServe | kRun)) {
    flag("--jinja", "chat templates are rendered with Jinja (always)", "");
    flag("--no-jinja", "llama.cpp's built-in template handlers", "templates are always Jinja");
  }
  if (command & kServe) {
    flag("--metrics", "GET /metrics (always on)", "");
    flag("--slots", "GET /slots (on unless --no-slots)", "");
    flag("--webui", "the chat page at / (on unless --no-webui)", "");
    flag("--cont-batching", "continuous batching (always on; also -cb)", "");
    flag("--no-cont-batching", "continuous batching off (also -nocb)",
         "the slots are always decoded together");
    flag("--kv-unified", "llama.cpp's one KV buffer shared by all slots (also -kvu)",
         "each slot gets -c / -np tokens of KV cache");
    value("--cache-ram", "llama.cpp's host-RAM prompt cache in MiB (also -cram)",
          always("prompt caches live in the slots (with --ctx-checkpoints); there is no "
                 "separate host-RAM cache"));
    value("--cache-reuse", "llama.cpp's KV-shift prompt reuse chunk",
          always("a cached prompt is reused from its longest common prefix"));
    value("--slot-prompt-similarity", "llama.cpp's slot choice by prompt similarity (also -sps)",
          always("a request goes to the free slot with the longest common prefix"));
    flag("--swa-full", "llama.cpp's full-size SWA cache", "the model has no sliding-window layers");
  }
  if (command & kRun) {
    flag("--no-conversation", "one prompt, then exit (always; also -no-cnv)", "");
    flag("--single-turn", "one prompt, then exit (always; also -st)", "");
    flag("--no-display-prompt", "the prompt is not echoed (always)", "");
  }
}

}  // namespace crossword::cli
