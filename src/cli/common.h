// The flag registry of the model-running subcommands (run, serve, bench, logits, check): one
// definition of each flag, with llama.cpp's names and meanings (llama-server, llama-cli,
// llama-bench), its LLAMA_ARG_* environment variable where llama.cpp has one, and the commands it
// applies to. llama.cpp's multi-letter short spellings and the flags that have no effect here are
// in cli/llama_flags.h.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace crossword::cli {

/// -c at most (16M tokens: beyond any model's training context; bounds the KV allocation asked
/// for).
inline constexpr int64_t kMaxCtx = int64_t{1} << 24;
/// -n at most; prompt + n_predict stays far from int64 overflow.
inline constexpr int64_t kMaxPredict = (int64_t{1} << 31) - 1;

/// The commands a registry flag applies to (a bit set).
enum Command : unsigned {
  kRun = 1u << 0,
  kServe = 1u << 1,
  kBench = 1u << 2,
  kTool = 1u << 3,  ///< logits, check
};

/// One line per flag given that is accepted for llama.cpp's sake but changes nothing here (printed
/// once at start-up, at warn level).
class FlagNotes {
 public:
  void Add(std::string line) { lines_.push_back(std::move(line)); }
  const std::vector<std::string>& lines() const { return lines_; }
  /// Prints each line through `log` (warn level, so --log-level warn still shows it).
  void Print(const Logger& log) const;

 private:
  std::vector<std::string> lines_;
};

/// Model and engine flags: -m, -t/-tb, -c, -b/-ub, -ctk/-ctv (--kv-type), --no-mmap, --mlock,
/// --no-repack, --log-level, --device, -ngl, --list-devices.
struct ModelFlags {
  std::string model;
  int threads = 0;
  int threads_batch = 0;  ///< -tb: llama.cpp's prompt threads; one pool here (a note if != -t)
  int64_t n_ctx = 4096;
  std::optional<int64_t> batch;   ///< -b: tokens per forward pass (run: prompt chunk)
  std::optional<int64_t> ubatch;  ///< -ub: one batch size here (a note if != -b)
  bool no_mmap = false;
  bool mlock = false;
  bool no_repack = false;
  std::string kv_type;                     ///< --kv-type (crossword's own spelling)
  std::string cache_type_k, cache_type_v;  ///< -ctk / -ctv
  std::string log_level = "info";
  std::string device = "auto";
  int n_gpu_layers = -1;
  bool list_devices = false;

  /// Registers the flags of `command` on `cmd`; the members' values at the call are the defaults
  /// (serve sets n_ctx = 0 first: 4096 per slot). -b/-ub are registered for run, serve and bench.
  void Add(CLI::App* cmd, Command command, bool model_required);
  /// With --list-devices: prints the devices to stdout and returns true (the command then ends).
  bool ListDevicesIfAsked() const;
  engine::EngineOptions ToEngineOptions() const;
  /// The KV cache type from --kv-type / -ctk / -ctv: f16 or f32 (a wider -ctk/-ctv wins). Other
  /// llama.cpp cache types (bf16, q8_0, ...) run as f16 with a note. Throws crossword::Error on a
  /// type llama.cpp does not know either.
  GgmlType KvType(FlagNotes* notes = nullptr) const;
  /// Notes for -tb / -ub that differ from -t / -b.
  void AddNotes(FlagNotes& notes) const;
  Logger MakeLogger() const;
};

/// Whether `e` runs a file written by `crossword gguf synth` (random weights: no question has a
/// known answer, so bench and check skip or refuse their known-answer questions).
bool IsSynthFile(const engine::Engine& e);

/// Decoding and sampling flags of run and serve: --mode, --block-size, --threshold, --draft-max,
/// --draft-p-min, --draft-expert-budget, -n, --temp, --top-k, --top-p, --min-p, -s/--seed,
/// --presence-penalty, --frequency-penalty, --repeat-penalty, --no-dllm-biases.
struct DecodeFlags {
  decode::DecodeOverrides decoding;
  /// -n: run: tokens at most (default 256); serve: the default max_tokens of a request (-1: the
  /// rest of the slot's context, as llama-server).
  int64_t n_predict = 256;
  bool no_dllm_biases = false;

  void Add(CLI::App* cmd, Command command);
  /// Throws crossword::Error on a sampling default out of range (checked before a model loads).
  void CheckSampling() const;
  /// Model defaults overridden by the flags given. Throws crossword::Error on bad values.
  decode::DecodeParams Apply(decode::DecodeParams defaults) const;
};

}  // namespace crossword::cli
