#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>

#include "shardload/error.h"
#include "shardload/model.h"

namespace shardload {

// Fills m.quantization and its parameters from config.json's quantization_config (absent: none). Throws
// Error(kConfig) naming the field for a method or format shardload does not load.
void read_quantization(const nlohmann::json& config, ModelConfig& m);

// The compressed-tensors branch of read_quantization (src/model/compressed_tensors_config.cc).
void read_compressed_tensors(const nlohmann::json& quantization_config, ModelConfig& m);

// Error(kConfig) in config.json at quantization_config.<field>, for both formats' readers.
Error quant_error(std::string message, const std::string& field, std::string expected, std::string found);

// An FP8 block size, [rows, cols] each 1 to 2^20 (weight_block_size, block_structure; `block` null
// when the field is absent); an error at quantization_config.<field> otherwise.
std::pair<uint64_t, uint64_t> read_block_size(const nlohmann::json* block, const std::string& field);

}  // namespace shardload
