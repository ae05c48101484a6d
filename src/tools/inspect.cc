// InspectJson / InspectText: one JSON document is the source; the text view renders it.
#include "tools/inspect.h"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>

#include "model/schema.h"
#include "tools/clover_layout.h"

namespace crossword::tools {
namespace {

using nlohmann::json;

// Metadata value as JSON: scalars and strings in full, arrays up to `max_items` items.
json ValueJson(const gguf::Value& v, size_t max_items) {
  using gguf::ValueType;
  switch (v.type()) {
    case ValueType::kString:
      return std::string(*v.AsString());
    case ValueType::kBool:
      return *v.AsBool();
    case ValueType::kFloat32:
    case ValueType::kFloat64:
      return *v.AsFloat();
    case ValueType::kArray: {
      json items = json::array();
      const uint64_t n = std::min<uint64_t>(v.array_size(), max_items);
      for (uint64_t i = 0; i < n; ++i) items.push_back(ValueJson(v.At(i), max_items));
      if (n == v.array_size()) return items;
      return json{{"array_type", gguf::ValueTypeName(v.array_type())},
                  {"length", v.array_size()},
                  {"first", items}};
    }
    default:
      if (auto i = v.AsInt()) return *i;
      return *v.AsUint();
  }
}

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} {}", b, units[u]) : fmt::format("{:.2f} {}", b, units[u]);
}

std::string ShapeString(const json& shape) {
  std::string s = "{";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i].get<int64_t>());
  return s + "}";
}

}  // namespace

json InspectJson(const gguf::File& file) {
  json j;
  j["file"] = file.path();
  j["file_size"] = file.file_size();
  j["version"] = file.version();
  j["alignment"] = file.alignment();
  j["data_offset"] = file.data_offset();
  const std::string arch(file.architecture());
  j["architecture"] = arch;
  j["name"] = std::string(file.Find("general.name") && file.Find("general.name")->AsString()
                              ? *file.Find("general.name")->AsString()
                              : std::string_view());
  json hyper = json::object();
  json metadata = json::array();
  for (const gguf::KeyValue& kv : file.metadata()) {
    const std::string key(kv.key);
    metadata.push_back(
        {{"key", key},
         {"type", kv.value.is_array()
                      ? fmt::format("array[{}]", gguf::ValueTypeName(kv.value.array_type()))
                      : gguf::ValueTypeName(kv.value.type())},
         {"value", key == "tokenizer.chat_template"
                       ? json(fmt::format("({} characters)",
                                          kv.value.AsString() ? kv.value.AsString()->size() : 0))
                       : ValueJson(kv.value, 8)}});
    if (!arch.empty() && key.starts_with(arch + "."))
      hyper[key.substr(arch.size() + 1)] = ValueJson(kv.value, 64);
  }
  j["hyperparameters"] = hyper;
  j["metadata"] = metadata;

  int64_t params = 0;
  std::map<std::string, std::array<uint64_t, 3>> mix;  // type -> tensors, bytes, parameters
  std::map<int, json> layers;
  json tensors = json::array();
  for (const gguf::TensorInfo& t : file.tensors()) {
    params += t.n_elements();
    auto& m = mix[std::string(TypeName(t.type))];
    m[0] += 1;
    m[1] += t.nbytes;
    m[2] += static_cast<uint64_t>(t.n_elements());
    json shape = json::array();
    for (int d = 0; d < t.n_dims; ++d) shape.push_back(t.ne[d]);
    tensors.push_back({{"name", t.name},
                       {"type", TypeName(t.type)},
                       {"shape", shape},
                       {"bytes", t.nbytes},
                       {"offset", t.offset}});
    const int il = LayerOfTensor(t.name);
    if (il < 0) continue;
    json& L = layers[il];
    if (L.is_null())
      L = {
          {"index", il}, {"kind", "other"}, {"experts", 0}, {"bytes", 0}, {"diffusion_tensors", 0}};
    L["bytes"] = L["bytes"].get<uint64_t>() + t.nbytes;
    // The layer kind from the tensor schema: a tensor only GDN (attention) layers hold.
    int spec_layer = -1;
    if (const model::TensorSpec* spec = model::FindTensorSpec(t.name, &spec_layer)) {
      if (spec->scope == model::TensorScope::kRecurrent) L["kind"] = "gdn";
      if (spec->scope == model::TensorScope::kAttention && L["kind"] == "other")
        L["kind"] = "attention";
    }
    if (t.name.ends_with(".ffn_gate_exps.weight") || t.name.ends_with(".ffn_gate_up_exps.weight"))
      L["experts"] = t.ne[2];
    if (IsDiffusionTensor(t.name)) L["diffusion_tensors"] = L["diffusion_tensors"].get<int>() + 1;
  }
  j["parameters"] = params;
  j["tensor_count"] = file.tensors().size();
  json mix_json = json::array();
  for (const auto& [type, m] : mix) {
    mix_json.push_back({{"type", type}, {"tensors", m[0]}, {"bytes", m[1]}, {"parameters", m[2]}});
  }
  j["quant_mix"] = mix_json;
  json layer_json = json::array();
  for (auto& [il, L] : layers) layer_json.push_back(L);
  j["layers"] = layer_json;
  const LayoutReport layout = ExamineLayout(file);
  if (layout.is_clover_family) {
    j["layout"] = {{"verdict", layout.verdict},
                   {"differences", layout.differences},
                   {"missing_shared_expert_count", layout.missing_shared_expert_count},
                   {"diffusion_tensors", layout.diffusion_tensors},
                   {"ssm_a_tensors", layout.ssm_a_tensors},
                   {"ssm_a_raw_a_log", layout.ssm_a_raw_a_log}};
  }
  j["tensors"] = tensors;
  return j;
}

std::string InspectText(const gguf::File& file) {
  const json j = InspectJson(file);
  std::string out;
  auto line = [&](std::string s) { out += s + "\n"; };
  line(fmt::format("file:          {}", j["file"].get<std::string>()));
  line(fmt::format("size:          {} bytes ({})", j["file_size"].get<uint64_t>(),
                   HumanBytes(j["file_size"].get<double>())));
  line(fmt::format("format:        GGUF v{}, alignment {}, data at byte {}",
                   j["version"].get<int>(), j["alignment"].get<uint64_t>(),
                   j["data_offset"].get<uint64_t>()));
  line(fmt::format("architecture:  {}", j["architecture"].get<std::string>()));
  if (!j["name"].get<std::string>().empty())
    line(fmt::format("name:          {}", j["name"].get<std::string>()));
  line(fmt::format("parameters:    {} ({:.3f} B) in {} tensors", j["parameters"].get<int64_t>(),
                   j["parameters"].get<double>() * 1e-9, j["tensor_count"].get<uint64_t>()));
  if (j.contains("layout")) {
    line(fmt::format("layout:        {}", j["layout"]["verdict"].get<std::string>()));
    for (const auto& d : j["layout"]["differences"]) line("               " + d.get<std::string>());
  }
  line("\nquant mix:");
  const double total = std::max(1.0, j["file_size"].get<double>());
  for (const auto& m : j["quant_mix"]) {
    line(fmt::format("  {:<6} {:>6} tensors  {:>14} bytes  {:>5.1f}%  {:>14} parameters",
                     m["type"].get<std::string>(), m["tensors"].get<uint64_t>(),
                     m["bytes"].get<uint64_t>(), 100.0 * m["bytes"].get<double>() / total,
                     m["parameters"].get<uint64_t>()));
  }
  if (!j["hyperparameters"].empty()) {
    line("\nhyperparameters:");
    for (const auto& [k, v] : j["hyperparameters"].items())
      line(fmt::format("  {:<36} {}", k, v.dump(-1, ' ', false, json::error_handler_t::replace)));
  }
  line("\nmetadata:");
  for (const auto& m : j["metadata"]) {
    std::string v = m["value"].dump(-1, ' ', false, json::error_handler_t::replace);
    if (v.size() > 100) v = v.substr(0, 97) + "...";
    line(fmt::format("  {:<44} {:<14} {}", m["key"].get<std::string>(),
                     m["type"].get<std::string>(), v));
  }
  if (!j["layers"].empty()) {
    line("\nlayers:");
    for (const auto& L : j["layers"]) {
      std::string extra =
          L["diffusion_tensors"].get<int>()
              ? fmt::format(", {} diffusion-only tensors", L["diffusion_tensors"].get<int>())
              : "";
      line(fmt::format("  blk.{:<3} {:<9} {:>3} experts  {:>12}{}", L["index"].get<int>(),
                       L["kind"].get<std::string>(), L["experts"].get<int64_t>(),
                       HumanBytes(L["bytes"].get<double>()), extra));
    }
  }
  line("\ntensors:");
  line(fmt::format("  {:<44} {:<6} {:<24} {:>14} {:>14}", "name", "type", "shape", "bytes",
                   "offset"));
  for (const auto& t : j["tensors"]) {
    line(fmt::format("  {:<44} {:<6} {:<24} {:>14} {:>14}", t["name"].get<std::string>(),
                     t["type"].get<std::string>(), ShapeString(t["shape"]),
                     t["bytes"].get<uint64_t>(), t["offset"].get<uint64_t>()));
  }
  return out;
}

}  // namespace crossword::tools
