#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "shardload/error.h"
#include "shardload/model.h"
#include "shardload/weight_format.h"

namespace shardload {

// Fills m.quantization and its parameters from config.json's quantization_config (absent: none). Throws
// Error(kConfig) naming the field for a method or format shardload does not load.
void read_quantization(const nlohmann::json& config, ModelConfig& m);

// The branches of read_quantization, one per format file: compressed_tensors.cc, fp8.cc, mxfp4.cc.
void read_compressed_tensors(const nlohmann::json& quantization_config, ModelConfig& m);
void read_fp8(const nlohmann::json& quantization_config, ModelConfig& m);
void read_mxfp4(const nlohmann::json& quantization_config, ModelConfig& m);

// compressed-tensors pack-quantized integer weights (pack_quantized.cc).
WeightFormat pack_quantized_format(const ModelConfig& model);
// compressed-tensors int-quantized int8 weights (int_quantized.cc).
WeightFormat int_quantized_format(const ModelConfig& model);
// compressed-tensors nvfp4-pack-quantized FP4 weights (nvfp4_pack_quantized.cc).
WeightFormat nvfp4_format(const ModelConfig& model);
// NVFP4 as both its producers store it (compressed-tensors, ModelOpt): E2M1 codes two a byte along K under
// `weight_suffix`, an F8_E4M3 weight_scale per 16 inputs; each adds its float32 per-part scalars.
WeightFormat nvfp4_group_format(std::string scheme, const char* weight_suffix);
CompanionTensor nvfp4_part_scalar(const char* suffix, ParamRole role);
// GPTQ's quant_method "gptq" (gptq.cc).
void read_gptq(const nlohmann::json& quantization_config, ModelConfig& m);
WeightFormat gptq_format(const ModelConfig& model);
// AWQ's quant_method "awq" (awq.cc).
void read_awq(const nlohmann::json& quantization_config, ModelConfig& m);
WeightFormat awq_format(const ModelConfig& model);

// NVIDIA ModelOpt's quant_method "modelopt", NVFP4 only (modelopt_nvfp4.cc): config.json's spelling or
// hf_quant_config.json's (its "quantization" object).
void read_modelopt(const nlohmann::json& quantization_config, ModelConfig& m);
WeightFormat modelopt_nvfp4_format(const ModelConfig& model);
// Whether exclude_modules leaves `module` quantized.
bool modelopt_module_quantized(const ModelConfig& model, std::string_view module);

// Error(kConfig) in config.json at quantization_config.<field>, for both formats' readers.
Error quant_error(std::string message, const std::string& field, std::string expected, std::string found);

// An FP8 block size, [rows, cols] each 1 to 2^20 (weight_block_size, block_structure; `block` null
// when the field is absent); an error at quantization_config.<field> otherwise.
std::pair<uint64_t, uint64_t> read_block_size(const nlohmann::json* block, const std::string& field);

}  // namespace shardload
