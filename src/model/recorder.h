// A ForwardObserver that keeps copies of a pass's named intermediates, and the comparison that
// finds the first one where two runs (two backends, or a backend and a perturbed twin) part.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/forward.h"

namespace crossword::model {

/// One recorded intermediate: a copy of TensorView's data.
struct RecordedTensor {
  std::string name;
  int layer = -1;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> data;  ///< rows x cols, row-major
};

/// Records every intermediate whose name is in `names` (empty: all), in pass order, appending
/// across passes. Allocates on each tensor (for tests and debugging, not for serving).
class TensorRecorder final : public ForwardObserver {
 public:
  explicit TensorRecorder(std::vector<std::string> names = {}) : names_(std::move(names)) {}
  bool Wants(std::string_view name, int layer) const override;
  void OnTensor(const TensorView& tensor) override;
  const std::vector<RecordedTensor>& tensors() const { return tensors_; }
  void Clear() { tensors_.clear(); }

 private:
  std::vector<std::string> names_;
  std::vector<RecordedTensor> tensors_;
};

/// Normalized mean squared error sum((a-b)^2) / max(sum(a^2), tiny) of two equally long arrays
/// (ggml's test-backend-ops measure); +inf when the lengths differ.
double Nmse(const std::vector<float>& a, const std::vector<float>& b);

/// Where two recordings part: the first tensor, in pass order, whose name, layer or shape differs
/// or whose NMSE exceeds `max_nmse`.
struct Divergence {
  size_t index = 0;  ///< position in the recordings
  std::string name;
  int layer = -1;
  double nmse = 0;  ///< +inf for a name/layer/shape mismatch
  /// "layer 2 ffn_out: NMSE 3.1e-02 > 1.0e-06".
  std::string Describe(double max_nmse) const;
};

/// The first divergence of `b` from `a`, or nullopt when every tensor agrees (and both hold
/// the same number of tensors; a missing tail counts as a divergence at its first tensor).
std::optional<Divergence> FirstDivergence(const TensorRecorder& a, const TensorRecorder& b,
                                          double max_nmse);

}  // namespace crossword::model
