// Activation quantization and dense matrix products (ops.h).
#include <algorithm>

#include "backends/vulkan/ops.h"
#include "backends/vulkan/ops_internal.h"

namespace crossword::vulkan {

using namespace internal;

namespace {

bool KQuant(GgmlType t) {
  return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ6_K;
}

uint32_t WeightUnit(GgmlType t) {
  return (t == GgmlType::kQ4_0 || t == GgmlType::kQ8_0 || t == GgmlType::kQ6_K) ? 2 : 4;
}

}  // namespace

int64_t ActQ8RowWords(GgmlType weight_type, int64_t n_in) {
  if (KQuant(weight_type)) return n_in / 4 + n_in / 256 + n_in / 16;
  return n_in / 4 + n_in / 32;
}

void QuantizeActivations(CommandList& cl, GgmlType weight_type, BufferView x, int64_t ldx,
                         int64_t n_rows, int64_t n_in, BufferView xq, int64_t ldq) {
  constexpr std::string_view op = "QuantizeActivations";
  Check(SupportsMatrix(weight_type, n_in) && weight_type != GgmlType::kF32 &&
            weight_type != GgmlType::kF16 && weight_type != GgmlType::kBF16,
        "vulkan {}: no int8 format for {} with {} inputs", op, TypeName(weight_type), n_in);
  const int64_t words = ActQ8RowWords(weight_type, n_in);
  Check(ldq >= words && ldx >= n_in, "vulkan {}: strides too small (ldq {} < {} or ldx {} < {})",
        op, ldq, words, ldx, n_in);
  if (n_rows == 0) return;
  const Binding bind[] = {{Need(x, RowsBytes(n_rows, ldx, n_in, 4), op, "x")},
                          {Need(xq, RowsBytes(n_rows, ldq, words, 4), op, "xq"), Access::kWrite}};
  const uint32_t push[] = {U32(n_in, op, "n_in"), U32(ldx, op, "ldx"), U32(ldq, op, "ldq"),
                           KQuant(weight_type) ? 1u : 0u};
  const uint32_t spec[] = {cl.WorkgroupSize(64), cl.device().info().subgroup_size};
  cl.Dispatch(Variant(cl, "quantize_q8"), spec, bind, push, U32((n_in + 255) / 256, op, "blocks"),
              U32(n_rows, op, "rows"));
}

void MatMul(CommandList& cl, const MatMulArgs& a) {
  constexpr std::string_view op = "MatMul";
  Check(a.w != nullptr && a.w->n_expert == 1 && !a.w->pieces.empty(),
        "vulkan MatMul: w is not an uploaded matrix");
  const DeviceMatrix& w = *a.w;
  if (a.n_rows == 0) return;
  const bool int8 = cl.UsesInt8(w.type);
  const int64_t x_len = int8 ? ActQ8RowWords(w.type, w.n_in) : w.n_in;
  const int64_t ldx = int8 ? a.ldxq : a.ldx;
  Check(ldx >= x_len, "vulkan MatMul: activation stride {} < row length {}", ldx, x_len);
  Check(a.ldy >= w.n_out || a.n_rows == 1, "vulkan MatMul: ldy {} < n_out {}", a.ldy, w.n_out);
  const BufferView x =
      Need(int8 ? a.xq : a.x, RowsBytes(a.n_rows, ldx, x_len, 4), op, int8 ? "xq" : "x");
  const BufferView y = Need(a.y, RowsBytes(a.n_rows, a.ldy, w.n_out, 4), op, "y");
  const uint32_t rows = 2;
  const uint32_t ncols = static_cast<uint32_t>(std::min<int64_t>(a.n_rows, 8));
  const uint32_t wg = cl.WorkgroupSize(64);
  const std::string name = Variant(cl, "mmv_" + TypeTag(w.type) + (int8 ? "_i8" : "_f"));
  const uint32_t spec[] = {wg, cl.device().info().subgroup_size, rows, ncols};
  const uint32_t unit = WeightUnit(w.type);
  for (const DeviceMatrix::Piece& p : w.pieces) {
    const uint64_t first = static_cast<uint64_t>(p.first) * 4;
    const BufferView yp = y.Sub(first, RowsBytes(a.n_rows, a.ldy, p.count, 4));
    const Binding bind[] = {{p.view, Access::kRead, unit},
                            {x},
                            {yp, a.accumulate ? Access::kReadWrite : Access::kWrite}};
    uint32_t gx, gz;
    WrapGroups((static_cast<uint64_t>(p.count) + rows - 1) / rows, &gx, &gz);
    const uint32_t push[] = {U32(w.n_in, op, "n_in"),     U32(p.count, op, "rows"),
                             U32(a.n_rows, op, "n_rows"), static_cast<uint32_t>(w.row_bytes / unit),
                             U32(ldx, op, "ldx"),         U32(a.ldy, op, "ldy"),
                             a.accumulate ? 1u : 0u,      gx};
    cl.Dispatch(name, spec, bind, push, gx, U32((a.n_rows + ncols - 1) / ncols, op, "cols"), gz);
  }
}

}  // namespace crossword::vulkan
