// LoadWeights: tensor lookup, shape/type validation and the official layout's quirks.
#include "model/weights.h"

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <new>

#include "base/error.h"
#include "core/quant.h"
#include "model/schema.h"

namespace crossword::model {
namespace {

std::string ShapeString(std::span<const int64_t> ne) {
  std::string s = "{";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

class TensorFinder {
 public:
  TensorFinder(const gguf::File& file, const Hparams& hp) : file_(file), hp_(hp) {}

  /// The tensor with exactly shape `ne` (trailing 1s may be omitted by the file).
  const gguf::TensorInfo& Get(const std::string& name, std::span<const int64_t> ne) const {
    const gguf::TensorInfo* t = file_.FindTensor(name);
    std::vector<int64_t> want(ne.begin(), ne.end());
    if (!t) {
      Fail(
          "{}: tensor '{}' not found (expected shape {}); the file is incomplete or not a {} model "
          "with these hyperparameters",
          file_.path(), name, ShapeString(want), hp_.arch);
    }
    bool ok = t->n_dims >= 1;
    for (int d = 0; d < 4 && ok; ++d) {
      const int64_t w = d < static_cast<int>(want.size()) ? want[d] : 1;
      ok = t->ne[d] == w;
    }
    if (!ok) {
      Fail(
          "{}: tensor '{}' has shape {}, expected {} from the hyperparameters; the metadata and "
          "the tensors disagree (re-export the file)",
          file_.path(), name, ShapeString(std::span(t->ne.data(), t->n_dims)), ShapeString(want));
    }
    return *t;
  }

  kernels::Matrix Matrix(const std::string& name, int64_t n_in, int64_t n_out) const {
    const int64_t ne[] = {n_in, n_out};
    const gguf::TensorInfo& t = Get(name, ne);
    return ToMatrix(t, n_in, n_out);
  }

  ExpertTensor Experts(const std::string& name, int64_t n_in, int64_t n_out,
                       int64_t n_expert) const {
    const int64_t ne[] = {n_in, n_out, n_expert};
    const gguf::TensorInfo& t = Get(name, ne);
    ExpertTensor e;
    e.first = ToMatrix(t, n_in, n_out);
    e.expert_stride = e.first.row_bytes * static_cast<size_t>(n_out);
    e.n_expert = static_cast<int>(n_expert);
    return e;
  }

  std::vector<float> Vector(const std::string& name, std::span<const int64_t> ne) const {
    const gguf::TensorInfo& t = Get(name, ne);
    if (!CanDequantize(t.type)) {
      Fail("{}: tensor '{}' has type {}, which cannot be converted to F32", file_.path(), name,
           TypeName(t.type));
    }
    std::vector<float> v(static_cast<size_t>(t.n_elements()));
    DequantizeRow(t.type, t.data, v.data(), t.n_elements());
    return v;
  }

  kernels::Matrix ToMatrix(const gguf::TensorInfo& t, int64_t n_in, int64_t n_out) const {
    try {
      (void)kernels::ActFormatFor(t.type);
    } catch (const Error&) {
      Fail(
          "{}: tensor '{}' has type {}; crossword multiplies F32, F16, BF16, Q8_0, Q4_0, Q4_K and "
          "Q6_K matrices (requantize the file, e.g. to Q4_K_M or Q8_0)",
          file_.path(), t.name, TypeName(t.type));
    }
    kernels::Matrix m;
    m.type = t.type;
    m.n_in = n_in;
    m.n_out = n_out;
    m.data = t.data;
    m.row_bytes = static_cast<size_t>(*RowBytes(t.type, n_in));
    return m;
  }

 private:
  const gguf::File& file_;
  const Hparams& hp_;
};

}  // namespace

std::string LayoutReport::Describe() const {
  if (!official()) return "upstream layout";
  std::string s = "official (fork) layout:";
  const char* sep = " ";
  if (shared_count_missing) {
    s += sep + std::string("expert_shared_count absent (using 1)");
    sep = "; ";
  }
  if (n_diffusion_tensors > 0) {
    s += sep + std::to_string(n_diffusion_tensors) +
         " diffusion-only tensors mapped, unused (semantics unpublished)";
    sep = "; ";
  }
  if (ssm_a_raw) s += sep + std::string("ssm_a holds raw A_log, converted to -exp(A_log) at load");
  return s;
}

Weights LoadWeights(const gguf::File& file, Hparams& hp, const Logger& logger) {
  const TensorFinder f(file, hp);
  Weights w;
  const gguf::TensorInfo* embd = file.FindTensor("token_embd.weight");
  if (!embd || embd->n_dims != 2 || embd->ne[0] != hp.n_embd || embd->ne[1] < 1) {
    Fail("{}: tensor 'token_embd.weight' must exist with shape {{{}, n_vocab}}", file.path(),
         hp.n_embd);
  }
  if (!CanDequantize(embd->type))
    Fail("{}: token_embd.weight has unsupported type {}", file.path(), TypeName(embd->type));
  if (hp.n_vocab > embd->ne[1]) {
    Fail("{}: tokenizer has {} tokens but token_embd.weight has only {} rows", file.path(),
         hp.n_vocab, embd->ne[1]);
  }
  hp.n_vocab = embd->ne[1];
  w.token_embd = embd->data;
  w.token_embd_type = embd->type;
  w.token_embd_row_bytes = static_cast<size_t>(*RowBytes(embd->type, hp.n_embd));
  const int64_t embd_shape[] = {hp.n_embd};
  w.output_norm = f.Vector("output_norm.weight", embd_shape);
  if (file.FindTensor("output.weight")) {
    w.output = f.Matrix("output.weight", hp.n_embd, hp.n_vocab);
  } else {
    w.output = f.ToMatrix(*embd, hp.n_embd, hp.n_vocab);
    logger.Info("{}: no output.weight; the output head reuses token_embd.weight (tied)",
                file.path());
  }

  w.layout.shared_count_missing = !hp.expert_shared_count_present && hp.arch == "clover_moe";
  bool any_positive_a = false;
  w.layers.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    L.kind = hp.layer_kinds[il];
    for (const TensorSpec& spec : Qwen35MoeSchema()) {
      if (!spec.InLayer(L.kind)) continue;
      const std::string name = spec.FullName(il);
      if (spec.presence == Presence::kDiffusionOnly) {
        w.layout.n_diffusion_tensors += file.FindTensor(name) != nullptr;
        continue;
      }
      if (spec.presence == Presence::kSharedExpert && hp.n_expert_shared == 0) continue;
      const std::vector<int64_t> ne = spec.Shape(hp);
      switch (spec.storage) {
        case Storage::kMatrix:
          L.*spec.matrix = f.Matrix(name, ne[0], ne[1]);
          break;
        case Storage::kExperts:
          L.*spec.experts = f.Experts(name, ne[0], ne[1], ne[2]);
          break;
        case Storage::kVector:
          L.*spec.vector = f.Vector(name, ne);
          break;
        case Storage::kRows:
        case Storage::kUnused:
          break;
      }
    }
    for (float a : L.ssm_a) any_positive_a |= a > 0.0f;
  }

  // Quirk 3: the fork stores raw A_log. Its other marks (diffusion tensors, missing key) say so;
  // a positive value can't be -exp(x) either, so it is raw whatever the other marks say.
  w.layout.ssm_a_raw = w.layout.n_diffusion_tensors > 0 || any_positive_a;
  if (w.layout.ssm_a_raw && w.layout.n_diffusion_tensors == 0) {
    logger.Warn(
        "{}: ssm_a holds positive values, which -exp(A_log) cannot: treating it as raw A_log",
        file.path());
  }
  if (w.layout.ssm_a_raw) {
    for (LayerWeights& L : w.layers) {
      for (float& a : L.ssm_a) a = -std::exp(a);
    }
  }
  if (hp.n_layer_nextn > 0) {
    logger.Info("{}: {} multi-token-prediction block(s) after the {} trunk layers are ignored",
                file.path(), hp.n_layer_nextn, hp.n_layer);
  }
  logger.Info("{}: {}", file.path(), w.layout.Describe());
  return w;
}

}  // namespace crossword::model
