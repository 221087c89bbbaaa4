// compressed-tensors "nvfp4-pack-quantized" (llm-compressor's NVFP4 and NVFP4A16; docs/layout.md
// "compressed-tensors NVFP4"): FP4 (E2M1) weights two a byte along K (value 2j in the low nibble), an FP8
// E4M3 scale per 16 inputs, and per projection a float32 global scale for the weights and, with NVFP4
// activations, one for the inputs. The rank tensors are those vLLM 0.33's weight loaders hold before
// post-processing (CompressedTensorsW4A4Fp4 and its MoE method): bytes and group scales cut on whole
// bytes and groups, each fused part's global scales kept side by side ([parts], experts [E_l, 2] / [E_l]).
#include <fmt/format.h>

#include "model/quant/quantization_config.h"

namespace shardload {

WeightFormat nvfp4_group_format(std::string scheme, const char* weight_suffix) {
  WeightFormat format;
  format.quantization = Quantization::kNvfp4;
  format.scheme = std::move(scheme);
  format.checkpoint_dtype = DType::kU8;
  format.rank_dtype = DType::kU8;
  format.weight_suffix = weight_suffix;
  format.pack_factor = 2;
  format.block_rows = 1;
  format.block_cols = 16;
  format.family_name = "NVFP4";
  format.block_name = "16-value groups";
  CompanionTensor scale;  // fields one by one: designated initializers would have to name every field (-Wextra)
  scale.checkpoint_suffix = scale.rank_suffix = "weight_scale";
  scale.dtype = scale.expert_dtype = CompanionDtype::kStored;
  scale.stored_dtype = DType::kF8E4M3;
  format.companions.push_back(scale);
  format.checks_scales = true;  // every scale read is checked: group scales and global ones
  return format;
}

CompanionTensor nvfp4_part_scalar(const char* suffix, ParamRole role) {
  CompanionTensor scalar;
  scalar.checkpoint_suffix = scalar.rank_suffix = suffix;
  scalar.layout = CompanionLayout::kPartTable;
  scalar.role = role;
  return scalar;
}

WeightFormat nvfp4_format(const ModelConfig& m) {
  WeightFormat format = nvfp4_group_format(
      fmt::format("compressed-tensors nvfp4-pack-quantized group 16, {}",
                  m.static_activations ? "NVFP4 activations" : "activations in the model dtype"),
      "weight_packed");
  format.companions.push_back(nvfp4_part_scalar("weight_global_scale", ParamRole::kWeightScale));
  if (m.static_activations) format.companions.push_back(nvfp4_part_scalar("input_global_scale", ParamRole::kInputScale));
  return format;
}

}  // namespace shardload
