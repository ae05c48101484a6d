// A loaded clover_moe / qwen35moe network, independent of the device that runs it: the GGUF file,
// its hyperparameters and its located, checked weight tensors (docs/model.md). Executors
// (model/forward.h, src/backends/*) run forward passes of it.
#pragma once

#include <memory>
#include <string>

#include "base/log.h"
#include "base/mapped_file.h"
#include "gguf/gguf.h"
#include "model/forward.h"
#include "model/hparams.h"
#include "model/weights.h"

namespace crossword::model {

struct LoadOptions {
  MapOptions map;  ///< mmap by default; --no-mmap reads into RAM; --mlock pins
  Logger logger;
};

/// A loaded network. Immutable after Load, so any number of executors and threads may share it.
/// The weights point into the file's mapping, which the Model owns.
class Model {
 public:
  /// Opens, validates and prepares `path`. Throws crossword::Error (file, key or tensor named).
  static std::unique_ptr<Model> Load(const std::string& path, const LoadOptions& options = {});
  /// As Load, from an already opened file (taken over).
  static std::unique_ptr<Model> FromFile(gguf::File file, const LoadOptions& options = {});

  const Hparams& hparams() const { return hp_; }
  /// The tensors as stored in the file (views into the mapping; no device copies).
  const Weights& weights() const { return w_; }
  const gguf::File& file() const { return *file_; }
  const LayoutReport& layout() const { return w_.layout; }
  const Logger& logger() const { return logger_; }

 private:
  Model() = default;
  std::unique_ptr<gguf::File> file_;
  Hparams hp_;
  Weights w_;
  Logger logger_;
};

}  // namespace crossword::model
