// RMSNorm (plain, residual add, gated) and per-head norm + rope (ops.h).
#include "backends/vulkan/ops.h"
#include "backends/vulkan/ops_internal.h"

namespace crossword::vulkan {

using namespace internal;

void RmsNorm(CommandList& cl, const RmsNormArgs& a) {
  constexpr std::string_view op = "RmsNorm";
  Check(a.n > 0 && a.n_heads > 0 && a.n_rows >= 0, "vulkan RmsNorm: bad shape");
  if (a.n_rows == 0) return;
  const int64_t x_hs = a.n_heads > 1 ? a.x_hs : 0, y_hs = a.n_heads > 1 ? a.y_hs : 0;
  const int64_t x_row = (a.n_heads - 1) * x_hs + a.n;
  const int64_t y_row = (a.n_heads - 1) * y_hs + a.n;
  Check(a.n_rows == 1 || (a.ldx >= x_row && a.ldy >= y_row),
        "vulkan RmsNorm: row strides ldx {} / ldy {} shorter than a row", a.ldx, a.ldy);
  const BufferView x = Need(a.x, RowsBytes(a.n_rows, a.ldx, x_row, 4), op, "x");
  const BufferView y = Need(a.y, RowsBytes(a.n_rows, a.ldy, y_row, 4), op, "y");
  const BufferView w = Optional(a.w, static_cast<uint64_t>(a.n) * 4, op, "w");
  BufferView r;
  int64_t ldr = 0, r_hs = 0;
  if (a.mode == RmsNormArgs::kAdd) {
    Check(a.n_heads == 1, "vulkan RmsNorm: the residual add works on whole rows (n_heads 1)");
    r = Need(a.residual, RowsBytes(a.n_rows, a.ld_res, a.n, 4), op, "residual");
    ldr = a.ld_res;
  } else if (a.mode == RmsNormArgs::kGate) {
    r_hs = a.n_heads > 1 ? a.gate_hs : 0;
    r = Need(a.gate, RowsBytes(a.n_rows, a.ld_gate, (a.n_heads - 1) * r_hs + a.n, 4), op, "gate");
    ldr = a.ld_gate;
  }
  const Binding bind[] = {{x, a.mode == RmsNormArgs::kAdd ? Access::kReadWrite : Access::kRead},
                          {w},
                          {r},
                          {y, Access::kWrite}};
  const uint32_t push[] = {U32(a.n, op, "n"),        U32(a.ldx, op, "ldx"),
                           U32(x_hs, op, "x_hs"),    U32(ldr, op, "ld residual/gate"),
                           U32(r_hs, op, "gate_hs"), U32(a.ldy, op, "ldy"),
                           U32(y_hs, op, "y_hs"),    static_cast<uint32_t>(a.mode),
                           w.valid() ? 1u : 0u,      Bits(a.eps)};
  const uint32_t wg = cl.WorkgroupSize(a.n >= 1024 ? 256 : 64);
  const uint32_t spec[] = {wg, cl.device().info().subgroup_size};
  cl.Dispatch(Variant(cl, "rms_norm"), spec, bind, push, U32(a.n_heads, op, "heads"),
              U32(a.n_rows, op, "rows"));
}

void HeadNormRope(CommandList& cl, const HeadNormRopeArgs& a) {
  constexpr std::string_view op = "HeadNormRope";
  Check(a.head_dim > 0 && a.head_dim <= 512 && a.n_heads > 0 && a.n_tokens >= 0,
        "vulkan HeadNormRope: head_dim {} must be in [1, 512]", a.head_dim);
  if (a.n_tokens == 0) return;
  const int64_t hs = a.n_heads > 1 ? a.head_stride : 0;
  const int64_t row = (a.n_heads - 1) * hs + a.head_dim;
  Check(a.n_tokens == 1 || a.ldx >= row, "vulkan HeadNormRope: ldx {} < {}", a.ldx, row);
  const BufferView x = Need(a.x, RowsBytes(a.n_tokens, a.ldx, row, 4), op, "x");
  const BufferView w = Optional(a.norm_w, static_cast<uint64_t>(a.head_dim) * 4, op, "norm_w");
  BufferView rope;
  if (a.rope.valid()) {
    Check(a.n_rot >= 2 && a.n_rot % 2 == 0 && a.n_rot <= a.head_dim,
          "vulkan HeadNormRope: n_rot {} must be even and <= head_dim", a.n_rot);
    Check(a.rope_positions > 0, "vulkan HeadNormRope: rope_positions must be set");
    rope = Need(a.rope, static_cast<uint64_t>(a.rope_positions) * a.n_rot * 4, op, "rope table");
  }
  const Binding bind[] = {{x, Access::kReadWrite}, {w}, {rope}};
  const uint32_t push[] = {U32(a.ldx, op, "ldx"),
                           U32(hs, op, "head_stride"),
                           U32(a.head_dim, op, "head_dim"),
                           static_cast<uint32_t>(a.n_rot),
                           U32(a.rope_positions, op, "rope_positions"),
                           DynWord(a.pos0),
                           SlotWord(a.pos0),
                           w.valid() ? 1u : 0u,
                           rope.valid() ? 1u : 0u,
                           Bits(a.eps)};
  const uint32_t spec[] = {cl.WorkgroupSize(64), cl.device().info().subgroup_size};
  cl.Dispatch(Variant(cl, "head_norm_rope"), spec, bind, push, static_cast<uint32_t>(a.n_heads),
              U32(a.n_tokens, op, "tokens"));
}

}  // namespace crossword::vulkan
