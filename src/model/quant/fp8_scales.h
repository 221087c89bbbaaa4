#pragma once

// The descriptors the FP8 formats share: the "fp8" quant_method and compressed-tensors FP8 differ in
// their config and scale names only, and dynamic FP8 is per-tensor FP8 made at load.

#include <string>

#include "shardload/weight_format.h"

namespace shardload {

// Static per-tensor FP8: a weight_scale per part (and an input_scale with static activations),
// requantized to the largest of the parts by post-processing.
WeightFormat per_tensor_fp8_format(const ModelConfig& model);
// Block FP8 (per-channel as 1 x kWholeRow blocks): a grid of scales named `scale_suffix` per part, cut
// with the weight on whole blocks.
WeightFormat block_fp8_format(const ModelConfig& model, const std::string& scale_suffix);
// --quantization fp8 on an unquantized checkpoint: the weight read as float32, quantized per slot.
WeightFormat dynamic_fp8_format(const ModelConfig& model);

// Each format file's descriptor of a checkpoint config.json says is in it.
WeightFormat fp8_weight_format(const ModelConfig& model);                 // fp8.cc
WeightFormat compressed_tensors_weight_format(const ModelConfig& model);  // compressed_tensors.cc

}  // namespace shardload
