// Detection of the official (fork) vs upstream Clover GGUF layouts.
#include "tools/clover_layout.h"

#include <fmt/format.h>

#include <charconv>
#include <vector>

#include "core/quant.h"
#include "model/schema.h"

namespace crossword::tools {

std::string SharedExpertCountKey(std::string_view arch) {
  return fmt::format("{}.expert_shared_count", arch);
}

int LayerOfTensor(std::string_view name) {
  if (!name.starts_with("blk.")) return -1;
  const char* begin = name.data() + 4;
  const char* end = name.data() + name.size();
  int layer = -1;
  auto [p, ec] = std::from_chars(begin, end, layer);
  if (ec != std::errc() || p == begin || p == end || *p != '.') return -1;
  return layer;
}

namespace {

// The part of a `blk.N.` name after the layer number, or "" when it is not a layer tensor.
std::string_view LayerSuffix(std::string_view name) {
  if (LayerOfTensor(name) < 0) return {};
  return name.substr(name.find('.', 4) + 1);
}

}  // namespace

bool IsDiffusionTensor(std::string_view name) {
  int layer = -1;
  const model::TensorSpec* spec = model::FindTensorSpec(name, &layer);
  return spec && spec->presence == model::Presence::kDiffusionOnly;
}

bool IsSsmA(std::string_view name) { return LayerSuffix(name) == "ssm_a"; }

LayoutReport ExamineLayout(const gguf::File& file) {
  LayoutReport r;
  r.architecture = std::string(file.architecture());
  r.is_clover_family = r.architecture == "clover_moe" || r.architecture == "qwen35moe";
  if (!r.is_clover_family) {
    r.verdict = "not a Clover/qwen35moe file";
    return r;
  }
  r.missing_shared_expert_count = file.Find(SharedExpertCountKey(r.architecture)) == nullptr;
  int gdn_layers = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (IsDiffusionTensor(t.name)) ++r.diffusion_tensors;
    if (!IsSsmA(t.name)) continue;
    ++r.ssm_a_tensors;
    ++gdn_layers;
    // ssm_a has one value per GDN value head; a huge one is not a real decay vector.
    if (!CanDequantize(t.type) || t.n_elements() > (1 << 20)) continue;
    std::vector<float> values(static_cast<size_t>(t.n_elements()));
    DequantizeRow(t.type, t.data, values.data(), t.n_elements());
    for (float v : values) {
      if (v >= 0.0f) {
        ++r.ssm_a_raw_a_log;
        break;
      }
    }
  }
  if (r.missing_shared_expert_count) {
    r.differences.push_back(fmt::format("1. key '{}' is missing (upstream requires it, value 1)",
                                        SharedExpertCountKey(r.architecture)));
  }
  if (r.diffusion_tensors > 0) {
    r.differences.push_back(fmt::format(
        "2. {} diffusion-only tensors present (ssm_bd_history.weight/.bias, "
        "ssm_bd_logit_scale.weight, ssm_conv1d.weight_right; {} expected for {} GDN layers)",
        r.diffusion_tensors, 4 * gdn_layers, gdn_layers));
  }
  if (r.ssm_a_raw_a_log > 0) {
    r.differences.push_back(fmt::format(
        "3. {} of {} ssm_a tensors hold raw A_log (elements >= 0; upstream expects -exp(A_log))",
        r.ssm_a_raw_a_log, r.ssm_a_tensors));
  }
  const bool official = r.missing_shared_expert_count && r.diffusion_tensors > 0;
  const bool upstream =
      !r.missing_shared_expert_count && r.diffusion_tensors == 0 && r.ssm_a_raw_a_log == 0;
  if (official) {
    r.verdict = "official (fork) layout";
    if (r.ssm_a_raw_a_log == 0 && r.ssm_a_tensors > 0) {
      r.differences.push_back(
          "3. ssm_a taken to hold raw A_log (all values are negative, so this cannot be "
          "confirmed from them)");
    }
  } else if (upstream) {
    r.verdict = "upstream layout";
  } else {
    r.verdict = "mixed layout";
  }
  return r;
}

}  // namespace crossword::tools
