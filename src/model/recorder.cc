// TensorRecorder and FirstDivergence: layer-by-layer comparison of forward passes.
#include "model/recorder.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace crossword::model {

bool TensorRecorder::Wants(std::string_view name, int) const {
  return names_.empty() || std::find(names_.begin(), names_.end(), name) != names_.end();
}

void TensorRecorder::OnTensor(const TensorView& t) {
  RecordedTensor r;
  r.name = std::string(t.name);
  r.layer = t.layer;
  r.rows = t.rows;
  r.cols = t.cols;
  r.data.assign(t.data, t.data + t.rows * t.cols);
  tensors_.push_back(std::move(r));
}

double Nmse(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double err = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    err += d * d;
    ref += static_cast<double>(a[i]) * a[i];
  }
  return err / std::max(ref, 1e-30);
}

std::string Divergence::Describe(double max_nmse) const {
  return fmt::format("tensor {} (layer {} {}): NMSE {:.3e} > {:.3e}", index, layer, name, nmse,
                     max_nmse);
}

std::optional<Divergence> FirstDivergence(const TensorRecorder& a, const TensorRecorder& b,
                                          double max_nmse) {
  const auto& ta = a.tensors();
  const auto& tb = b.tensors();
  const double inf = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < std::max(ta.size(), tb.size()); ++i) {
    const RecordedTensor& x = i < ta.size() ? ta[i] : tb[i];
    if (i >= ta.size() || i >= tb.size()) return Divergence{i, x.name, x.layer, inf};
    const RecordedTensor& y = tb[i];
    if (x.name != y.name || x.layer != y.layer || x.rows != y.rows || x.cols != y.cols)
      return Divergence{i, x.name, x.layer, inf};
    const double e = Nmse(x.data, y.data);
    if (!(e <= max_nmse)) return Divergence{i, x.name, x.layer, e};
  }
  return std::nullopt;
}

}  // namespace crossword::model
