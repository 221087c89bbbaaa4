#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tiny/tiny_model.h"

namespace shardload::tiny {

// make-tiny --config: the generator's model of a real config.json (family from architectures[0],
// every size and count, quantization_config), so that the checkpoint has that model's tensor names
// and full shapes, exactly the tensors the planner expects for the config. Throws Error(kConfig)
// naming `file` and the field for a config ModelConfig::from_json refuses, or one the generator
// cannot reproduce: a dtype other than bfloat16, a block size other than 128 x 128, a field whose
// tensors the family's generator does not write (e.g. Llama attention_bias), a MoE layer pattern
// outside the family's rule, or a model past the generator's bounds.
TinyModel model_from_config(const nlohmann::json& config, const std::string& file);

}  // namespace shardload::tiny
