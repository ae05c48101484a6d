// Activations: the reserved buffer that holds activation rows converted for a weight type.
#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "kernels/kernels.h"
#include "kernels/ref.h"
#if defined(__x86_64__)
#include "kernels/vnni_kernels.h"
#endif

namespace crossword::kernels {

ActFormat ActFormatFor(GgmlType weight_type) {
  switch (weight_type) {
    case GgmlType::kF32:
      return ActFormat::kF32;
    case GgmlType::kF16:  // f32 activations: no rounding, and no batch-size-dependent choice
      return ActFormat::kF32;
    case GgmlType::kBF16:
      return ActFormat::kBF16;
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
      return ActFormat::kQ8_0;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return ActFormat::kQ8_K;
    default:
      Fail(
          "kernels: weight type {} has no matrix kernel (supported: F32, F16, BF16, Q8_0, Q4_0, "
          "Q4_K, Q5_K, Q6_K); re-quantize the model to one of these",
          TypeName(weight_type));
  }
}

void Activations::Reserve(int64_t max_rows, int64_t max_n_in) {
  Check(max_rows >= 0 && max_n_in >= 0, "Activations::Reserve: negative size ({} rows, n_in {})",
        max_rows, max_n_in);
  size_t per_row = 0;
  for (ActFormat f :
       {ActFormat::kF32, ActFormat::kF16, ActFormat::kBF16, ActFormat::kQ8_0, ActFormat::kQ8_K}) {
    per_row = std::max(per_row, ref::ActRowStride(f, max_n_in));
  }
  const size_t bytes = per_row * static_cast<size_t>(max_rows);
  if (bytes <= capacity_) return;
  storage_.assign(bytes + 64, 0);
  const auto addr = reinterpret_cast<uintptr_t>(storage_.data());
  data_ = storage_.data() + ((64 - addr % 64) % 64);
  capacity_ = bytes;
}

void Activations::SetShape(ActFormat format, int64_t n_rows, int64_t n_in) {
  const int64_t bs = ref::ActBlockSize(format);
  Check(n_rows >= 0 && n_in >= 0 && n_in % bs == 0 && (bs == 1 || n_in % 16 == 0),
        "Activations: n_in {} must be a non-negative multiple of the block size {} ({} rows)", n_in,
        bs, n_rows);
  const ref::ActRowLayout layout = ref::ActLayout(format, n_in);
  const size_t stride = layout.stride;
  Check(stride * static_cast<size_t>(n_rows) <= capacity_,
        "Activations: {} rows of n_in {} need {} bytes but only {} are reserved; call Reserve() "
        "with the largest batch at load time",
        n_rows, n_in, stride * static_cast<size_t>(n_rows), capacity_);
  format_ = format;
  n_rows_ = n_rows;
  n_in_ = n_in;
  row_stride_ = stride;
  scale_offset_ = layout.scale;
  sums_offset_ = layout.sums;
  biased_offset_ = layout.biased;
}

}  // namespace crossword::kernels
