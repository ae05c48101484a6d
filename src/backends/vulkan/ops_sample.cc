// Top-k / argmax over logits on the device (ops.h).
#include <algorithm>

#include "backends/vulkan/ops.h"
#include "backends/vulkan/ops_internal.h"

namespace crossword::vulkan {

using namespace internal;

namespace {

constexpr uint32_t kTopKWorkgroup = 256;

// Elements per invocation of stage 1 so that n_chunks * k candidates fit stage 2 (8192) and
// chunks stay at least 16 values per invocation.
uint32_t ElementsPerThread(int64_t n_vocab, int k) {
  const int64_t max_chunks = std::max<int64_t>(1, 8192 / k);
  const int64_t per_chunk = (n_vocab + max_chunks - 1) / max_chunks;
  return static_cast<uint32_t>(
      std::max<int64_t>(16, (per_chunk + kTopKWorkgroup - 1) / kTopKWorkgroup));
}

}  // namespace

int64_t TopKScratchFloats(int64_t n_rows, int64_t n_vocab, int k) {
  const int64_t chunk = static_cast<int64_t>(ElementsPerThread(n_vocab, k)) * kTopKWorkgroup;
  return n_rows * ((n_vocab + chunk - 1) / chunk) * (2 + 2 * k);
}

void TopK(CommandList& cl, const TopKArgs& a) {
  constexpr std::string_view op = "TopK";
  Check(a.k >= 1 && a.k <= 64 && a.k <= a.n_vocab, "vulkan TopK: need 1 <= k ({}) <= 64", a.k);
  Check(a.temperature > 0.0f, "vulkan TopK: temperature must be > 0 (use 1 for greedy)");
  if (a.n_rows == 0) return;
  const uint32_t ept = ElementsPerThread(a.n_vocab, a.k);
  Check(ept <= 64, "vulkan TopK: {} logits per row are too many", a.n_vocab);
  const int64_t chunk = static_cast<int64_t>(ept) * kTopKWorkgroup;
  const int64_t n_chunks = (a.n_vocab + chunk - 1) / chunk;
  const BufferView scratch =
      Need(a.scratch, TopKScratchFloats(a.n_rows, a.n_vocab, a.k) * 4, op, "scratch");
  const uint32_t inv_temp = Bits(1.0f / a.temperature);
  const uint32_t wg = std::max(kTopKWorkgroup, cl.device().info().subgroup_size);
  {
    const Binding bind[] = {{Need(a.logits, RowsBytes(a.n_rows, a.ld, a.n_vocab, 4), op, "logits")},
                            {scratch, Access::kWrite}};
    const uint32_t push[] = {U32(a.ld, op, "ld"), U32(a.n_vocab, op, "n_vocab"),
                             static_cast<uint32_t>(a.k), U32(n_chunks, op, "chunks"), inv_temp};
    const uint32_t spec[] = {wg, cl.device().info().subgroup_size, ept};
    cl.Dispatch(Variant(cl, "topk_stage1"), spec, bind, push, U32(n_chunks, op, "chunks"),
                U32(a.n_rows, op, "rows"));
  }
  const uint64_t out = static_cast<uint64_t>(a.n_rows) * a.k * 4;
  const Binding bind[] = {
      {scratch},
      {Need(a.ids, out, op, "ids"), Access::kWrite},
      {Need(a.values, out, op, "values"), Access::kWrite},
      {Need(a.probs, out, op, "probs"), Access::kWrite},
      {Need(a.stats, static_cast<uint64_t>(a.n_rows) * 8, op, "stats"), Access::kWrite}};
  const uint32_t push[] = {static_cast<uint32_t>(a.k), U32(n_chunks, op, "chunks"), inv_temp};
  const uint32_t spec[] = {wg, cl.device().info().subgroup_size};
  cl.Dispatch(Variant(cl, "topk_stage2"), spec, bind, push, U32(a.n_rows, op, "rows"));
}

}  // namespace crossword::vulkan
