// Mixture-of-experts ops: routing, grouping by expert, grouped gate/up + SwiGLU, grouped down,
// combine with the gated shared expert (ops.h).
#include <algorithm>

#include "backends/vulkan/ops.h"
#include "backends/vulkan/ops_internal.h"

namespace crossword::vulkan {

using namespace internal;

namespace {

uint32_t WeightUnit(GgmlType t) {
  return (t == GgmlType::kQ4_0 || t == GgmlType::kQ8_0 || t == GgmlType::kQ6_K) ? 2 : 4;
}

// Shared part of MoeGateUp / MoeDown: one dispatch per piece of the stack.
struct GroupedArgs {
  std::string_view op;
  std::string_view shader;  // "moe_gate_up" or "moe_down"
  const DeviceMatrix* w;
  BufferView x, xq;
  int64_t ldx, ldxq, n_tokens;
  int k;
  BufferView group;
  bool dense;
  BufferView out;
  int64_t ldo;
  int64_t out_rows_per_expert;  // n_ff (gate/up) or n_out (down)
};

void Grouped(CommandList& cl, const GroupedArgs& g) {
  const std::string_view op = g.op;
  Check(g.w != nullptr && !g.w->pieces.empty(), "vulkan {}: weights are not uploaded", op);
  const DeviceMatrix& w = *g.w;
  Check(g.k >= 1 && g.n_tokens >= 0, "vulkan {}: bad k / n_tokens", op);
  Check(w.n_expert > 1 || w.pieces.size() == 1,
        "vulkan {}: a single-expert matrix must fit one binding (it has {} pieces)", op,
        w.pieces.size());
  if (g.n_tokens == 0) return;
  const bool int8 = cl.UsesInt8(w.type);
  const int64_t x_len = int8 ? ActQ8RowWords(w.type, w.n_in) : w.n_in;
  const int64_t ldx = int8 ? g.ldxq : g.ldx;
  Check(ldx >= x_len, "vulkan {}: activation stride {} < {}", op, ldx, x_len);
  Check(g.ldo >= g.out_rows_per_expert, "vulkan {}: output stride {} < {}", op, g.ldo,
        g.out_rows_per_expert);
  // Input and output rows: tokens (gate/up input, dense) or pairs t*k + j.
  const bool gate_up = g.shader == "moe_gate_up";
  const int64_t pairs = g.n_tokens * g.k;
  const int64_t in_rows = (gate_up || g.dense) ? g.n_tokens : pairs;
  const int64_t out_rows = g.dense ? g.n_tokens : pairs;
  const BufferView x =
      Need(int8 ? g.xq : g.x, RowsBytes(in_rows, ldx, x_len, 4), op, int8 ? "xq" : "x");
  const BufferView out =
      Need(g.out, RowsBytes(out_rows, g.ldo, g.out_rows_per_expert, 4), op, "output");
  const MoeGroupLayout lay = MoeGroupLayoutFor(g.n_tokens, g.k, static_cast<int>(w.n_expert));
  const BufferView group =
      g.dense ? BufferView{} : Need(g.group, static_cast<uint64_t>(lay.words) * 4, op, "group");
  const uint32_t rows = 2;
  const int64_t max_tokens = g.dense ? g.n_tokens : std::min<int64_t>(g.n_tokens, 8);
  const uint32_t ncols = static_cast<uint32_t>(std::clamp<int64_t>(max_tokens, 1, 8));
  const uint32_t unit = WeightUnit(w.type);
  const std::string name =
      Variant(cl, std::string(g.shader) + "_" + TypeTag(w.type) + (int8 ? "_i8" : "_f"));
  const uint32_t spec[] = {cl.WorkgroupSize(64), cl.device().info().subgroup_size, rows, ncols};
  const uint32_t slots = g.dense ? 1 : static_cast<uint32_t>(lay.max_active);
  const uint32_t row_groups = static_cast<uint32_t>((g.out_rows_per_expert + rows - 1) / rows);
  for (const DeviceMatrix::Piece& p : w.pieces) {
    if (g.dense && p.first != 0) continue;
    const Binding bind[] = {{p.view, Access::kRead, unit}, {x}, {group}, {out, Access::kWrite}};
    std::vector<uint32_t> push = {U32(w.n_in, op, "n_in"),
                                  U32(g.out_rows_per_expert, op, "rows"),
                                  static_cast<uint32_t>(w.row_bytes / unit),
                                  static_cast<uint32_t>(w.expert_bytes() / unit),
                                  U32(p.first, op, "first"),
                                  U32(p.count, op, "count"),
                                  U32(ldx, op, "ldx"),
                                  U32(g.ldo, op, "ldo"),
                                  g.dense ? 1u : 0u,
                                  U32(g.n_tokens, op, "n_tokens"),
                                  U32(lay.active, op, "layout")};
    if (gate_up) push.push_back(U32(lay.pair_token, op, "layout"));
    push.push_back(U32(lay.pair_row, op, "layout"));
    cl.Dispatch(name, spec, bind, push, row_groups, slots);
  }
}

}  // namespace

void MoeRoute(CommandList& cl, BufferView logits, int64_t ld, int64_t n_tokens, int n_expert, int k,
              BufferView ids, BufferView weights) {
  constexpr std::string_view op = "MoeRoute";
  Check(n_expert >= 1 && n_expert <= 1024 && k >= 1 && k <= std::min(n_expert, 64),
        "vulkan MoeRoute: need 1 <= k ({}) <= min(n_expert ({}), 64), n_expert <= 1024", k,
        n_expert);
  if (n_tokens == 0) return;
  const Binding bind[] = {
      {Need(logits, RowsBytes(n_tokens, ld, n_expert, 4), op, "logits")},
      {Need(ids, static_cast<uint64_t>(n_tokens) * k * 4, op, "ids"), Access::kWrite},
      {Need(weights, static_cast<uint64_t>(n_tokens) * k * 4, op, "weights"), Access::kWrite}};
  const uint32_t push[] = {U32(ld, op, "ld"), static_cast<uint32_t>(n_expert),
                           static_cast<uint32_t>(k)};
  const uint32_t spec[] = {cl.WorkgroupSize(256), cl.device().info().subgroup_size};
  cl.Dispatch(Variant(cl, "moe_route"), spec, bind, push, U32(n_tokens, op, "tokens"));
}

MoeGroupLayout MoeGroupLayoutFor(int64_t n_tokens, int k, int n_expert) {
  MoeGroupLayout l;
  const int64_t pairs = n_tokens * k;
  l.max_active = std::min<int64_t>(pairs, n_expert);
  l.active = 4;
  l.pair_token = l.active + 3 * l.max_active;
  l.pair_row = l.pair_token + pairs;
  l.words = l.pair_row + pairs;
  return l;
}

void MoeGroup(CommandList& cl, BufferView ids, int64_t n_tokens, int k, int n_expert,
              BufferView group) {
  constexpr std::string_view op = "MoeGroup";
  Check(n_expert >= 1 && n_expert <= 1024 && k >= 1, "vulkan MoeGroup: bad n_expert / k");
  if (n_tokens == 0) return;
  const MoeGroupLayout lay = MoeGroupLayoutFor(n_tokens, k, n_expert);
  const Binding bind[] = {
      {Need(ids, static_cast<uint64_t>(n_tokens) * k * 4, op, "ids")},
      {Need(group, static_cast<uint64_t>(lay.words) * 4, op, "group"), Access::kWrite}};
  const uint32_t push[] = {U32(n_tokens * k, op, "pairs"),    static_cast<uint32_t>(k),
                           static_cast<uint32_t>(n_expert),   U32(lay.active, op, "layout"),
                           U32(lay.pair_token, op, "layout"), U32(lay.pair_row, op, "layout")};
  const uint32_t spec[] = {256, cl.device().info().subgroup_size};
  cl.Dispatch("moe_group", spec, bind, push, 1);
}

void MoeGateUp(CommandList& cl, const MoeGateUpArgs& a) {
  Check(a.gate_up && a.gate_up->n_out % 2 == 0, "vulkan MoeGateUp: gate_up must have 2 n_ff rows");
  GroupedArgs g{"MoeGateUp", "moe_gate_up", a.gate_up, a.x,     a.xq, a.ldx, a.ldxq,
                a.n_tokens,  a.k,           a.group,   a.dense, a.h,  a.ldh, a.gate_up->n_out / 2};
  Grouped(cl, g);
}

void MoeDown(CommandList& cl, const MoeDownArgs& a) {
  Check(a.down != nullptr, "vulkan MoeDown: down is missing");
  GroupedArgs g{"MoeDown",  "moe_down", a.down,  a.h,     a.hq,  a.ldh, a.ldhq,
                a.n_tokens, a.k,        a.group, a.dense, a.out, a.ldo, a.down->n_out};
  Grouped(cl, g);
}

void MoeCombine(CommandList& cl, const MoeCombineArgs& a) {
  constexpr std::string_view op = "MoeCombine";
  Check(a.k >= 1 && a.n_embd > 0, "vulkan MoeCombine: bad k / n_embd");
  if (a.n_tokens == 0) return;
  const int64_t pairs = a.n_tokens * a.k;
  const bool shared = a.shared.valid();
  const Binding bind[] = {
      {Need(a.down, RowsBytes(pairs, a.ld_down, a.n_embd, 4), op, "down")},
      {Need(a.weights, static_cast<uint64_t>(pairs) * 4, op, "weights")},
      {shared ? Need(a.shared, RowsBytes(a.n_tokens, a.ld_shared, a.n_embd, 4), op, "shared")
              : BufferView{}},
      {shared ? Need(a.shared_gate_w, a.n_embd * 4, op, "shared_gate_w") : BufferView{}},
      {shared ? Need(a.f, RowsBytes(a.n_tokens, a.ldf, a.n_embd, 4), op, "f") : BufferView{}},
      {Need(a.y, RowsBytes(a.n_tokens, a.ldy, a.n_embd, 4), op, "y"),
       a.accumulate ? Access::kReadWrite : Access::kWrite}};
  const uint32_t push[] = {U32(a.ld_down, op, "ld_down"),
                           static_cast<uint32_t>(a.k),
                           U32(a.ld_shared, op, "ld_shared"),
                           U32(a.ldf, op, "ldf"),
                           U32(a.ldy, op, "ldy"),
                           U32(a.n_embd, op, "n_embd"),
                           shared ? 1u : 0u,
                           a.accumulate ? 1u : 0u};
  const uint32_t spec[] = {cl.WorkgroupSize(256), cl.device().info().subgroup_size};
  cl.Dispatch(Variant(cl, "moe_combine"), spec, bind, push, U32(a.n_tokens, op, "tokens"));
}

}  // namespace crossword::vulkan
