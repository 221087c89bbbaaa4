#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

namespace shardload {

// NVIDIA ModelOpt checkpoints may keep their quantization config in hf_quant_config.json beside
// config.json ({producer, quantization: {quant_algo, ...}}) instead of config.json's
// quantization_config. When config.json has none and the file is there, it becomes config's
// quantization_config (quant_method "modelopt" added, as vLLM 0.33 does for a file whose producer.name
// is "modelopt"), so every reader of config.json sees one quantization config. Throws Error(kConfig)
// naming the file when it is not a JSON object or another producer's. Returns whether it took the file.
bool merge_hf_quant_config(const std::filesystem::path& dir, nlohmann::json& config);

}  // namespace shardload
