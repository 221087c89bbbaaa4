#pragma once

#include <nlohmann/json.hpp>

#include "shardload/model.h"

namespace shardload {

// Fills m.quantization and its parameters from config.json's quantization_config (absent: none). Throws
// Error(kConfig) naming the field for a method or format shardload does not load.
void read_quantization(const nlohmann::json& config, ModelConfig& m);

// The compressed-tensors branch of read_quantization (src/model/compressed_tensors_config.cc).
void read_compressed_tensors(const nlohmann::json& quantization_config, ModelConfig& m);

}  // namespace shardload
