// Which format file describes a checkpoint's linear weights.
#include "shardload/weight_format.h"

#include "model/quant/fp8_scales.h"

namespace shardload {

WeightFormat weight_format(const ModelConfig& model, bool quantize_at_load) {
  if (model.quantization == Quantization::kNone) {
    if (quantize_at_load) return dynamic_fp8_format(model);
    WeightFormat none;
    none.scheme = std::string(quantization_name(Quantization::kNone));
    return none;
  }
  if (model.quant_format == QuantFormat::kCompressedTensors) return compressed_tensors_weight_format(model);
  if (model.quant_format == QuantFormat::kGptq) return gptq_format(model);
  if (model.quant_format == QuantFormat::kAwq) return awq_format(model);
  if (model.quant_format == QuantFormat::kModelopt) return modelopt_nvfp4_format(model);
  return fp8_weight_format(model);
}

}  // namespace shardload
