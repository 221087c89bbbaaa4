// compressed-tensors "int-quantized" (llm-compressor's W8A8 int8; docs/layout.md "compressed-tensors W8A8
// int8"): int8 weights [N, K] stored as they are, one scale per output row (channel strategy), the
// activations quantized per token at run time (no input scale in the checkpoint). The rank tensors are
// those vLLM 0.33's weight loaders hold before post-processing (CompressedTensorsW8A8Int8 and its MoE
// method): the int8 weight cut as a bf16 one, the scale float32 [N_r, 1] (experts [E_l, N_r, 1]).
#include "model/quant/quantization_config.h"

namespace shardload {

WeightFormat int_quantized_format(const ModelConfig&) {
  WeightFormat format;
  format.quantization = Quantization::kInt8;
  format.scheme = "compressed-tensors int-quantized int8 channel symmetric, dynamic token activations";
  format.checkpoint_dtype = DType::kI8;
  format.rank_dtype = DType::kI8;
  format.block_rows = 1;
  format.block_cols = kWholeRow;  // one scale a row, never cut along K
  format.family_name = "W8A8";
  format.block_name = "rows";
  CompanionTensor scale;  // fields one by one: designated initializers would have to name every field (-Wextra)
  scale.checkpoint_suffix = scale.rank_suffix = "weight_scale";
  format.companions.push_back(scale);
  format.checks_scales = true;  // nothing to compute, but every scale read is checked
  return format;
}

}  // namespace shardload
