// Options shared by the model-running subcommands (-m, -t, -c, --no-mmap, ...).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "engine/engine.h"

namespace crossword::cli {

/// -c at most (16M tokens: beyond any model's training context; bounds the KV allocation asked
/// for).
inline constexpr int64_t kMaxCtx = int64_t{1} << 24;
/// -n at most; prompt + n_predict stays far from int64 overflow.
inline constexpr int64_t kMaxPredict = (int64_t{1} << 31) - 1;

struct ModelFlags {
  std::string model;
  int threads = 0;
  int64_t n_ctx = 4096;
  bool no_mmap = false;
  bool mlock = false;
  bool no_repack = false;
  std::string kv_type = "f16";
  std::string log_level = "info";
  std::string device = "auto";
  int n_gpu_layers = -1;
  bool list_devices = false;

  /// Adds -m/--model, -t/--threads, -c/--ctx-size, --no-mmap, --mlock, --no-repack, --kv-type,
  /// --log-level, --device, -ngl/--n-gpu-layers (main.cc spells -ngl as --n-gpu-layers for
  /// CLI11), --list-devices.
  void Add(CLI::App* cmd, bool model_required);
  /// With --list-devices: prints the devices to stdout and returns true (the command then ends).
  bool ListDevicesIfAsked() const;
  engine::EngineOptions ToEngineOptions() const;
  GgmlType KvType() const;
  Logger MakeLogger() const;
};

/// Whether `e` runs a file written by `crossword gguf synth` (random weights: no question has a
/// known answer, so bench and check skip or refuse their known-answer questions).
bool IsSynthFile(const engine::Engine& e);

/// Sampling and decoding flags: --mode, --block-size, --threshold, --draft-max, --draft-p-min, -n,
/// --temp, --top-k, --top-p, --min-p, --seed, --presence-penalty, --frequency-penalty,
/// --repeat-penalty, --no-dllm-biases.
struct DecodeFlags {
  decode::DecodeOverrides decoding;
  int64_t n_predict = 256;
  std::optional<double> temperature, top_p, min_p, presence, frequency, repeat;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  bool no_dllm_biases = false;

  void Add(CLI::App* cmd);
  /// Model defaults overridden by the flags given. Throws crossword::Error on bad values.
  decode::DecodeParams Apply(decode::DecodeParams defaults) const;
};

}  // namespace crossword::cli
