// Gated DeltaNet ops: gates, conv1d + SiLU + L2 norm, conv-window rollback, the recurrence.
#include <algorithm>
#include <cmath>

#include "backends/vulkan/ops.h"
#include "backends/vulkan/ops_internal.h"

namespace crossword::vulkan {

using namespace internal;

void GdnGates(CommandList& cl, BufferView b, int64_t ldb, BufferView a, int64_t lda,
              BufferView dt_bias, BufferView ssm_a, int64_t n_tokens, int n_v_heads, BufferView g,
              BufferView beta, int64_t ldg) {
  constexpr std::string_view op = "GdnGates";
  Check(n_v_heads >= 1, "vulkan GdnGates: n_v_heads must be >= 1");
  if (n_tokens == 0) return;
  const uint64_t hv = static_cast<uint64_t>(n_v_heads) * 4;
  const Binding bind[] = {
      {Need(b, RowsBytes(n_tokens, ldb, n_v_heads, 4), op, "b")},
      {Need(a, RowsBytes(n_tokens, lda, n_v_heads, 4), op, "a")},
      {Need(dt_bias, hv, op, "dt_bias")},
      {Need(ssm_a, hv, op, "ssm_a")},
      {Need(g, RowsBytes(n_tokens, ldg, n_v_heads, 4), op, "g"), Access::kWrite},
      {Need(beta, RowsBytes(n_tokens, ldg, n_v_heads, 4), op, "beta"), Access::kWrite}};
  const uint32_t push[] = {U32(ldb, op, "ldb"), U32(lda, op, "lda"), U32(ldg, op, "ldg"),
                           U32(n_tokens, op, "tokens"), static_cast<uint32_t>(n_v_heads)};
  const uint32_t wg = 64;
  const uint32_t spec[] = {wg, cl.device().info().subgroup_size};
  cl.Dispatch("gdn_gates", spec, bind, push, U32((n_tokens * n_v_heads + wg - 1) / wg, op, "n"));
}

void CausalConv1dSiluL2(CommandList& cl, const Conv1dArgs& a) {
  constexpr std::string_view op = "CausalConv1dSiluL2";
  Check(a.K >= 1 && a.K <= 16, "vulkan {}: kernel size {} must be in [1, 16]", op, a.K);
  Check(a.head_dim >= 8 && a.head_dim <= 1024 && (a.head_dim & (a.head_dim - 1)) == 0 &&
            a.C % a.head_dim == 0,
        "vulkan {}: head_dim {} must be a power of two in [8, 1024] dividing C {}", op, a.head_dim,
        a.C);
  Check(a.n_l2_heads >= 0 && a.n_l2_heads * a.head_dim <= a.C, "vulkan {}: n_l2_heads {}", op,
        a.n_l2_heads);
  if (a.T == 0) return;
  const uint64_t state = static_cast<uint64_t>(a.K - 1) * a.C * 4;
  const BufferView si = a.K > 1 ? Need(a.state_in, state, op, "state_in") : BufferView{};
  const BufferView so = a.K > 1 ? Need(a.state_out, state, op, "state_out") : BufferView{};
  const BufferView rec =
      a.K > 1 ? Optional(a.state0_record, state, op, "state0_record") : BufferView{};
  const uint32_t wg = static_cast<uint32_t>(a.head_dim);
  Check(cl.reduction() == Reduction::kShared || wg >= cl.device().info().subgroup_size,
        "vulkan {}: head_dim {} is smaller than the subgroup size", op, wg);
  const Binding bind[] = {{Need(a.x, RowsBytes(a.T, a.ldx, a.C, 4), op, "x")},
                          {Need(a.w, static_cast<uint64_t>(a.C) * a.K * 4, op, "w")},
                          {si},
                          {so, Access::kWrite},
                          {Need(a.y, RowsBytes(a.T, a.ldy, a.C, 4), op, "y"), Access::kWrite},
                          {rec, Access::kWrite}};
  const uint32_t push[] = {U32(a.ldx, op, "ldx"),
                           U32(a.ldy, op, "ldy"),
                           U32(a.T, op, "T"),
                           U32(a.C, op, "C"),
                           U32(a.n_l2_heads, op, "n_l2_heads"),
                           rec.valid() ? 1u : 0u,
                           Bits(a.l2_eps)};
  const uint32_t spec[] = {wg, cl.device().info().subgroup_size, static_cast<uint32_t>(a.K)};
  cl.Dispatch(Variant(cl, "conv1d"), spec, bind, push, U32(a.C / a.head_dim, op, "heads"));
}

void ConvStateRollback(CommandList& cl, BufferView conv0, BufferView x_record, int64_t ldx,
                       int64_t C, int K, DynInt n_keep, int64_t max_keep, BufferView state_out) {
  constexpr std::string_view op = "ConvStateRollback";
  Check(K >= 2 && C >= 1 && max_keep >= 0, "vulkan {}: bad K {} / C {}", op, K, C);
  const uint64_t state = static_cast<uint64_t>(K - 1) * C * 4;
  const BufferView xr =
      max_keep > 0 ? Need(x_record, RowsBytes(max_keep, ldx, C, 4), op, "x_record") : BufferView{};
  const Binding bind[] = {{Need(conv0, state, op, "conv0")},
                          {xr},
                          {Need(state_out, state, op, "state_out"), Access::kWrite}};
  const uint32_t push[] = {U32(ldx, op, "ldx"), U32(C, op, "C"), static_cast<uint32_t>(K),
                           DynWord(n_keep), SlotWord(n_keep)};
  const uint32_t wg = 64;
  const uint32_t spec[] = {wg, cl.device().info().subgroup_size};
  cl.Dispatch("conv_rollback", spec, bind, push,
              U32((static_cast<int64_t>(K - 1) * C + wg - 1) / wg, op, "n"));
}

void GatedDeltaRule(CommandList& cl, const GdnArgs& a) {
  constexpr std::string_view op = "GatedDeltaRule";
  Check(a.dk >= 1 && a.dk <= 256 && a.dv >= 1 && a.dv <= 256,
        "vulkan {}: dk {} and dv {} must be in [1, 256]", op, a.dk, a.dv);
  Check(a.n_k_heads >= 1 && a.n_v_heads >= 1 && a.n_v_heads % a.n_k_heads == 0,
        "vulkan {}: n_v_heads {} must be a multiple of n_k_heads {}", op, a.n_v_heads, a.n_k_heads);
  Check(a.max_T >= 0 && (a.T.slot >= 0 || (a.T.value >= 0 && a.T.value <= a.max_T)),
        "vulkan {}: T must be in [0, max_T]", op);
  const int64_t T = a.max_T;
  const uint64_t state = static_cast<uint64_t>(a.n_v_heads) * a.dv * a.dk * 4;
  const int64_t kd = a.n_k_heads * a.dk, vd = a.n_v_heads * a.dv;
  const BufferView none;
  const Binding bind[] = {
      {T > 0 ? Need(a.q, RowsBytes(T, a.ldq, kd, 4), op, "q") : none},
      {T > 0 ? Need(a.k, RowsBytes(T, a.ldk, kd, 4), op, "k") : none},
      {T > 0 ? Need(a.v, RowsBytes(T, a.ldv, vd, 4), op, "v") : none},
      {T > 0 ? Need(a.g, RowsBytes(T, a.ldg, a.n_v_heads, 4), op, "g") : none},
      {T > 0 ? Need(a.beta, RowsBytes(T, a.ldg, a.n_v_heads, 4), op, "beta") : none},
      {Need(a.state_in, state, op, "state_in")},
      {Need(a.state_out, state, op, "state_out"), Access::kWrite},
      {T > 0 ? Need(a.out, RowsBytes(T, a.ldo, vd, 4), op, "out") : none, Access::kWrite},
      {Optional(a.state0_record, state, op, "state0_record"), Access::kWrite}};
  // LANES invocations share a state row: 8 as llama.cpp's shader; rows per workgroup WG/LANES.
  const uint32_t lanes = static_cast<uint32_t>(std::min<int64_t>(8, a.dk));
  const uint32_t per_lane = static_cast<uint32_t>((a.dk + lanes - 1) / lanes);
  const uint32_t wg = cl.WorkgroupSize(128);
  const uint32_t rows_per_wg = wg / lanes;
  const float scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(a.dk));
  const uint32_t push[] = {
      DynWord(a.T),          SlotWord(a.T),         static_cast<uint32_t>(a.n_k_heads),
      U32(a.dk, op, "dk"),   U32(a.dv, op, "dv"),   U32(a.ldq, op, "ldq"),
      U32(a.ldk, op, "ldk"), U32(a.ldv, op, "ldv"), U32(a.ldg, op, "ldg"),
      U32(a.ldo, op, "ldo"), Bits(scale),           a.state0_record.valid() ? 1u : 0u};
  const uint32_t spec[] = {wg, cl.device().info().subgroup_size, lanes, per_lane};
  cl.Dispatch(Variant(cl, "gdn"), spec, bind, push,
              static_cast<uint32_t>((a.dv + rows_per_wg - 1) / rows_per_wg),
              static_cast<uint32_t>(a.n_v_heads));
}

}  // namespace crossword::vulkan
