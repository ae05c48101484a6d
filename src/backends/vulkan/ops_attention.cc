// KV cache writes and attention (ops.h).
#include <algorithm>
#include <cmath>

#include "backends/vulkan/ops.h"
#include "backends/vulkan/ops_internal.h"

namespace crossword::vulkan {

using namespace internal;

void KvWrite(CommandList& cl, BufferView k, int64_t ldk, BufferView v, int64_t ldv,
             int64_t n_tokens, int64_t row_elems, DynInt pos0, BufferView k_cache,
             BufferView v_cache, int64_t n_ctx) {
  constexpr std::string_view op = "KvWrite";
  Check(row_elems >= 1 && n_ctx >= 1, "vulkan KvWrite: bad row_elems / n_ctx");
  if (n_tokens == 0) return;
  const uint64_t cache = static_cast<uint64_t>(n_ctx) * row_elems * 2;
  const Binding bind[] = {{Need(k, RowsBytes(n_tokens, ldk, row_elems, 4), op, "k")},
                          {Need(v, RowsBytes(n_tokens, ldv, row_elems, 4), op, "v")},
                          {Need(k_cache, cache, op, "k_cache"), Access::kWrite, 2},
                          {Need(v_cache, cache, op, "v_cache"), Access::kWrite, 2}};
  const uint32_t push[] = {U32(ldk, op, "ldk"),
                           U32(ldv, op, "ldv"),
                           U32(row_elems, op, "row"),
                           U32(n_tokens, op, "tokens"),
                           U32(n_ctx, op, "n_ctx"),
                           DynWord(pos0),
                           SlotWord(pos0)};
  const uint32_t wg = 256;
  const uint32_t spec[] = {wg, cl.device().info().subgroup_size};
  cl.Dispatch("kv_write", spec, bind, push, U32((n_tokens * row_elems + wg - 1) / wg, op, "n"));
}

int64_t AttentionScratchFloats(int64_t T, int n_head, int n_splits, int64_t head_dim) {
  return T * n_head * n_splits * (head_dim + 2);
}

int AttentionSplitsFor(int64_t max_kv) {
  return static_cast<int>(std::clamp<int64_t>((max_kv + 511) / 512, 1, 32));
}

void Attention(CommandList& cl, const AttentionArgs& a) {
  constexpr std::string_view op = "Attention";
  Check(a.head_dim >= 2 && a.head_dim <= 256 && a.head_dim % 2 == 0 && a.kv_row % 2 == 0,
        "vulkan Attention: head_dim {} must be even and <= 256, kv_row {} even", a.head_dim,
        a.kv_row);
  Check(a.n_head >= 1 && a.n_head_kv >= 1 && a.n_head % a.n_head_kv == 0,
        "vulkan Attention: n_head {} must be a multiple of n_head_kv {}", a.n_head, a.n_head_kv);
  Check(a.kv_row >= a.n_head_kv * a.head_dim, "vulkan Attention: kv_row {} too small", a.kv_row);
  Check(a.n_splits >= 1 && a.n_ctx >= 1 && a.T >= 0, "vulkan Attention: bad n_splits / n_ctx");
  if (a.T == 0) return;
  const int64_t q_hs = a.n_head > 1 ? a.q_hs : 0;
  const int64_t o_hs = a.n_head > 1 ? a.out_hs : 0;
  const int64_t q_row = (a.n_head - 1) * q_hs + a.head_dim;
  const int64_t o_row = (a.n_head - 1) * o_hs + a.head_dim;
  const uint64_t cache = static_cast<uint64_t>(a.n_ctx) * a.kv_row * 2;
  const BufferView scratch = Need(
      a.scratch, AttentionScratchFloats(a.T, a.n_head, a.n_splits, a.head_dim) * 4, op, "scratch");
  const uint32_t tile = cl.WorkgroupSize(64);
  const uint32_t dpt = static_cast<uint32_t>((a.head_dim + tile - 1) / tile);
  const float scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  {
    const Binding bind[] = {{Need(a.q, RowsBytes(a.T, a.ldq, q_row, 4), op, "q")},
                            {Need(a.k_cache, cache, op, "k_cache"), Access::kRead, 4},
                            {Need(a.v_cache, cache, op, "v_cache"), Access::kRead, 2},
                            {scratch, Access::kWrite}};
    const uint32_t push[] = {U32(a.ldq, op, "ldq"),
                             U32(q_hs, op, "q_hs"),
                             U32(a.kv_row, op, "kv_row"),
                             U32(a.n_ctx, op, "n_ctx"),
                             U32(a.T, op, "T"),
                             DynWord(a.n_past),
                             SlotWord(a.n_past),
                             static_cast<uint32_t>(a.n_head),
                             static_cast<uint32_t>(a.n_head / a.n_head_kv),
                             U32(a.head_dim, op, "head_dim"),
                             a.causal ? 1u : 0u,
                             static_cast<uint32_t>(a.n_splits),
                             Bits(scale)};
    const uint32_t spec[] = {tile, cl.device().info().subgroup_size, dpt};
    cl.Dispatch(Variant(cl, "attention"), spec, bind, push, static_cast<uint32_t>(a.n_splits),
                static_cast<uint32_t>(a.n_head), U32(a.T, op, "T"));
  }
  const int64_t g_hs = a.n_head > 1 ? a.gate_hs : 0;
  const BufferView gate = Optional(
      a.gate, RowsBytes(a.T, a.ld_gate, (a.n_head - 1) * g_hs + a.head_dim, 4), op, "gate");
  const Binding bind[] = {
      {scratch}, {gate}, {Need(a.out, RowsBytes(a.T, a.ldo, o_row, 4), op, "out"), Access::kWrite}};
  const uint32_t push[] = {static_cast<uint32_t>(a.n_head), static_cast<uint32_t>(a.n_splits),
                           U32(a.head_dim, op, "head_dim"), U32(a.ld_gate, op, "ld_gate"),
                           U32(g_hs, op, "gate_hs"),        U32(a.ldo, op, "ldo"),
                           U32(o_hs, op, "out_hs"),         gate.valid() ? 1u : 0u};
  const uint32_t spec[] = {64, cl.device().info().subgroup_size};
  cl.Dispatch("attention_reduce", spec, bind, push, static_cast<uint32_t>(a.n_head),
              U32(a.T, op, "T"));
}

}  // namespace crossword::vulkan
