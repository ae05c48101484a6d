// Model loading: the file, its hyperparameters and its weight tensors (device-independent).
#include "model/model.h"

namespace crossword::model {

std::unique_ptr<Model> Model::Load(const std::string& path, const LoadOptions& options) {
  return FromFile(gguf::File::Open(path, options.map), options);
}

std::unique_ptr<Model> Model::FromFile(gguf::File file, const LoadOptions& options) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::make_unique<gguf::File>(std::move(file));
  m->logger_ = options.logger;
  m->hp_ = ReadHparams(*m->file_, m->logger_);
  m->w_ = LoadWeights(*m->file_, m->hp_, m->logger_);
  return m;
}

}  // namespace crossword::model
