// Shared op helpers and the small ops: Add, GetRows, RopeTable, ReadProbe (ops.h).
#include <algorithm>
#include <cctype>
#include <cmath>

#include "backends/vulkan/ops.h"
#include "backends/vulkan/ops_internal.h"

namespace crossword::vulkan {
namespace internal {

std::string TypeTag(GgmlType type) {
  std::string s(TypeName(type));
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

BufferView Need(BufferView v, uint64_t bytes, std::string_view op, std::string_view what) {
  Check(v.valid(), "vulkan {}: {} is missing", op, what);
  Check(v.size >= bytes, "vulkan {}: {} has {} bytes, the shapes need {}", op, what, v.size, bytes);
  return v.Sub(0, bytes);
}

BufferView Optional(BufferView v, uint64_t bytes, std::string_view op, std::string_view what) {
  if (!v.valid()) return BufferView{};
  return Need(v, bytes, op, what);
}

uint32_t U32(int64_t v, std::string_view op, std::string_view what) {
  Check(v >= 0 && v <= 0xffffffffLL, "vulkan {}: {} = {} is out of range", op, what, v);
  return static_cast<uint32_t>(v);
}

void WrapGroups(uint64_t total, uint32_t* gx, uint32_t* gz) {
  const uint64_t x = std::min<uint64_t>(std::max<uint64_t>(total, 1), 65535);
  *gx = static_cast<uint32_t>(x);
  *gz = static_cast<uint32_t>((std::max<uint64_t>(total, 1) + x - 1) / x);
}

std::string Variant(const CommandList& cl, std::string_view base) {
  std::string s(base);
  s += cl.ReductionSuffix();
  return s;
}

}  // namespace internal

using namespace internal;

void Add(CommandList& cl, BufferView a, BufferView b, BufferView y, int64_t n) {
  const uint64_t bytes = static_cast<uint64_t>(n) * 4;
  const Binding bind[] = {{Need(a, bytes, "Add", "a")},
                          {Need(b, bytes, "Add", "b")},
                          {Need(y, bytes, "Add", "y"), Access::kWrite}};
  const uint32_t wg = 256;
  uint32_t gx, gz;
  WrapGroups((static_cast<uint64_t>(n) + wg - 1) / wg, &gx, &gz);
  const uint32_t push[] = {U32(n, "Add", "n"), gx};
  const uint32_t spec[] = {wg, cl.device().info().subgroup_size};
  cl.Dispatch("elementwise", spec, bind, push, gx, 1, gz);
}

void GetRows(CommandList& cl, const DeviceMatrix& table, BufferView ids, int64_t n_rows,
             BufferView out, int64_t ldo) {
  Check(table.n_expert == 1 && !table.pieces.empty(), "vulkan GetRows: table is not a matrix");
  Check(ldo >= table.n_in, "vulkan GetRows: ldo {} < row length {}", ldo, table.n_in);
  if (n_rows == 0) return;
  const BufferView id_view = Need(ids, static_cast<uint64_t>(n_rows) * 4, "GetRows", "ids");
  const BufferView o = Need(out, RowsBytes(n_rows, ldo, table.n_in, 4), "GetRows", "out");
  const uint32_t unit = (table.type == GgmlType::kQ4_0 || table.type == GgmlType::kQ8_0 ||
                         table.type == GgmlType::kQ6_K)
                            ? 2
                            : 4;
  const uint32_t wg = 64;
  const uint32_t chunks = U32(table.n_in / 32, "GetRows", "n_in");
  const std::string name = "get_rows_" + TypeTag(table.type);
  const uint32_t spec[] = {wg, cl.device().info().subgroup_size};
  for (const DeviceMatrix::Piece& p : table.pieces) {
    const Binding bind[] = {{p.view, Access::kRead, unit}, {id_view}, {o, Access::kWrite}};
    const uint32_t push[] = {U32(table.n_in, "GetRows", "n_in"),
                             U32(p.first, "GetRows", "first"),
                             U32(p.count, "GetRows", "count"),
                             U32(table.n_out, "GetRows", "n_out"),
                             static_cast<uint32_t>(table.row_bytes / unit),
                             U32(ldo, "GetRows", "ldo"),
                             p.first == 0 ? 1u : 0u};
    cl.Dispatch(name, spec, bind, push, (chunks + wg - 1) / wg, U32(n_rows, "GetRows", "rows"));
  }
}

std::vector<float> RopeTable(int64_t n_pos, int n_rot, float freq_base) {
  Check(n_pos >= 1 && n_rot >= 2 && n_rot % 2 == 0, "vulkan RopeTable: bad n_pos {} / n_rot {}",
        n_pos, n_rot);
  const int half = n_rot / 2;
  std::vector<float> t(static_cast<size_t>(n_pos) * half * 2);
  // The same float operations as kernels::RopeNeox (ref.cc): theta starts at pos and is
  // multiplied by theta_scale once per pair.
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_rot));
  for (int64_t pos = 0; pos < n_pos; ++pos) {
    float theta = static_cast<float>(pos);
    float* row = t.data() + pos * half * 2;
    for (int i = 0; i < half; ++i) {
      row[2 * i] = std::cos(theta);
      row[2 * i + 1] = std::sin(theta);
      theta *= theta_scale;
    }
  }
  return t;
}

void ReadProbe(CommandList& cl, BufferView src, BufferView out, uint32_t groups) {
  Check(src.size % 16 == 0, "vulkan ReadProbe: source size must be a multiple of 16");
  const uint32_t wg = cl.WorkgroupSize(256);
  const Binding bind[] = {{src, Access::kRead, 16},
                          {Need(out, uint64_t{groups} * 4, "ReadProbe", "out"), Access::kWrite}};
  const uint32_t push[] = {static_cast<uint32_t>(src.size / 16)};
  const uint32_t spec[] = {wg, cl.device().info().subgroup_size};
  cl.Dispatch(Variant(cl, "read_bw"), spec, bind, push, groups);
}

}  // namespace crossword::vulkan
