// compressed-tensors "pack-quantized" (llm-compressor's W4A16 and W8A16, Kimi-K2.5's routed
// experts; docs/layout.md "compressed-tensors W4A16 / W8A16"): integer weights packed along K into
// int32 words, `32 / bits` values a word, a scale per group of inputs (or per row) in the model
// dtype, a zero point per group packed along N when asymmetric, and the weight's [N, K] beside it.
// The rank tensors are those vLLM 0.33's weight loaders hold before post-processing
// (CompressedTensorsWNA16, and its MoE method's N-first experts), so nothing is converted: words,
// scales and zero points are cut on whole words and whole groups.
#include <fmt/format.h>

#include "model/quant/quantization_config.h"

namespace shardload {

WeightFormat pack_quantized_format(const ModelConfig& m) {
  const bool channel = m.weight_strategy == WeightStrategy::kChannel;
  WeightFormat format;
  format.quantization = Quantization::kWna16;
  format.scheme = fmt::format("compressed-tensors pack-quantized int{} {} {}", m.weight_bits,
                              channel ? "channel" : fmt::format("group {}", m.group_size),
                              m.zero_points ? "asymmetric" : "symmetric");
  format.checkpoint_dtype = DType::kI32;
  format.rank_dtype = DType::kI32;
  format.weight_suffix = "weight_packed";
  format.pack_factor = 32 / m.weight_bits;
  format.block_rows = 1;
  format.block_cols = m.group_size;  // kWholeRow for channel: one scale a row, never cut
  format.family_name = fmt::format("W{}A16", m.weight_bits);
  format.block_name = channel ? "rows" : fmt::format("{}-value groups", m.group_size);

  // Set field by field: designated initializers would have to name every field (-Wextra).
  CompanionTensor scale;
  scale.checkpoint_suffix = scale.rank_suffix = "weight_scale";
  scale.dtype = scale.expert_dtype = CompanionDtype::kModel;
  format.companions.push_back(scale);
  if (m.zero_points) {
    // [N / pack_factor, K / group]: a grid whose blocks are pack_factor rows by a group.
    CompanionTensor zero;
    zero.checkpoint_suffix = zero.rank_suffix = "weight_zero_point";
    zero.role = ParamRole::kWeightAux;
    zero.dtype = zero.expert_dtype = CompanionDtype::kStored;
    zero.stored_dtype = DType::kI32;
    zero.block_rows = format.pack_factor;
    zero.block_cols = m.group_size;
    format.companions.push_back(zero);
  }
  // int64 [N, K] a part (int32 in Kimi-K2.5's routed experts); vLLM's MoE method keeps it per expert in the
  // model dtype.
  CompanionTensor shape;
  shape.checkpoint_suffix = shape.rank_suffix = "weight_shape";
  shape.layout = CompanionLayout::kWholeLastNamed;
  shape.role = ParamRole::kWeightAux;
  shape.dtype = CompanionDtype::kStored;
  shape.expert_dtype = CompanionDtype::kModel;
  shape.stored_dtype = DType::kI64;
  shape.expert_alt_dtype = DType::kI32;  // Kimi-K2.5's routed experts (converted to the model dtype)
  format.companions.push_back(shape);
  format.checks_scales = true;  // nothing to compute, but every scale read is checked (in its model dtype)
  return format;
}

}  // namespace shardload
