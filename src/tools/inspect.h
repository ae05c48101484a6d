// `crossword gguf inspect`: what a GGUF file holds (architecture, parameters, quant mix, per-layer
// summary, tensor table) and, for Clover-family files, which layout it uses.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "gguf/gguf.h"

namespace crossword::tools {

/// The whole inspection as one JSON document:
/// {"file", "file_size", "version", "alignment", "data_offset", "architecture", "name",
///  "parameters", "tensor_count", "quant_mix": [{"type", "tensors", "bytes", "parameters"}],
///  "hyperparameters": {key: value} (the `<arch>.` keys), "metadata": [{"key", "type", "value"}]
///  (long arrays summarised), "layers": [{"index", "kind": "gdn"|"attention"|"other",
///  "experts", "bytes", "diffusion_tensors"}], "layout": {"verdict", "differences": [...], ...}
///  (Clover family only), "tensors": [{"name", "type", "shape", "bytes", "offset"}]}.
nlohmann::json InspectJson(const gguf::File& file);

/// The same content as readable text (tensor table last).
std::string InspectText(const gguf::File& file);

}  // namespace crossword::tools
