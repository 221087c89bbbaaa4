#pragma once

#include <nlohmann/json.hpp>

#include <optional>

#include "shardload/export.h"
#include "shardload/plan.h"

namespace shardload {

// The config.json an engine's export carries, where the model's own would not load the export: nullopt
// when it is copied as it is. vLLM decides which GPTQ layers are quantized from the checkpoint's tensor
// names when quantization_config has no modules_in_block_to_quantize, and matches its fused layers
// (qkv_proj, gate_up_proj) by their parts' names, which an export's fused rank tensors do not have: its
// sharded_state load would build them unquantized. So the export names the checkpoint's quantized layers. Its AWQ
// methods read modules_to_not_convert from the tensors' dtypes the same way (every module without an integer
// tensor) and match it by substring: the export names the checkpoint's, which its own renames (a MoE router
// moved under experts.) would change.
std::optional<nlohmann::json> engine_config(const Plan& plan, Engine engine, const nlohmann::json& config);

}  // namespace shardload
