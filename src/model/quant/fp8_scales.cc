#include "model/quant/fp8_scales.h"

#include <fmt/format.h>

namespace shardload {
namespace {

// What reload compares: the label and every parameter that shapes the scales (a channel-wise update
// of per-tensor weights would change the scales' shapes under captured graphs).
std::string scheme_text(const ModelConfig& m, Quantization loaded) {
  std::string text(quantization_label(m, loaded));
  if (m.quant_format == QuantFormat::kCompressedTensors) {
    text += fmt::format(" ({} weights)", weight_strategy_name(m.weight_strategy));
  }
  if (loaded == Quantization::kFp8Block) {
    text += fmt::format(" blocks {}x{}", m.block_rows, m.block_cols == kWholeRow ? 0 : m.block_cols);
  }
  return text;
}

WeightFormat fp8_codes(const ModelConfig& m, Quantization loaded) {
  WeightFormat format;
  format.quantization = loaded;
  format.scheme = scheme_text(m, loaded);
  format.checkpoint_dtype = DType::kF8E4M3;
  format.rank_dtype = DType::kF8E4M3;
  return format;
}

}  // namespace

WeightFormat per_tensor_fp8_format(const ModelConfig& m) {
  WeightFormat format = fp8_codes(m, Quantization::kFp8);
  format.companions.push_back({"weight_scale", "weight_scale", CompanionLayout::kPartScalar,
                               ParamRole::kWeightScale, ParamRole::kWeightScaleParts, "weight_scale_parts",
                               /*merged_keeps_parts=*/true});
  if (m.static_activations) {
    format.companions.push_back({"input_scale", "input_scale", CompanionLayout::kPartScalar,
                                 ParamRole::kInputScale, ParamRole::kInputScaleParts, "input_scale_parts",
                                 /*merged_keeps_parts=*/false});
  }
  format.post = PostProcess::kFp8Requantize;
  return format;
}

WeightFormat block_fp8_format(const ModelConfig& m, const std::string& scale_suffix) {
  WeightFormat format = fp8_codes(m, Quantization::kFp8Block);
  format.block_rows = m.block_rows;
  format.block_cols = m.block_cols;
  format.companions.push_back({scale_suffix, scale_suffix, CompanionLayout::kBlockGrid, ParamRole::kWeightScale,
                               ParamRole::kWeightScaleParts, ""});
  format.checks_scales = true;  // nothing to compute, but every scale read is checked
  // A family's own scale names and dtype (DeepSeek-V4: X.scale, F8_E8M0): the grid read under its name
  // and kept as its bytes (a cast would turn the exponents into other values). Every E8M0 byte but 0xFF
  // (NaN) is a positive power of two: nothing to check that the engines check.
  if (!m.block_scale_suffix.empty()) format.companions.back().checkpoint_suffix = m.block_scale_suffix;
  if (m.block_scale_dtype) {
    CompanionTensor& scale = format.companions.back();
    scale.dtype = scale.expert_dtype = CompanionDtype::kStored;
    scale.stored_dtype = m.block_scale_dtype;
    format.checks_scales = false;
    format.scheme += fmt::format(" scales {}", dtype_name(*m.block_scale_dtype));
  }
  return format;
}

WeightFormat dynamic_fp8_format(const ModelConfig& m) {
  WeightFormat format = fp8_codes(m, Quantization::kFp8Dynamic);
  format.checkpoint_dtype.reset();
  format.companions.push_back({"", "weight_scale", CompanionLayout::kMadeAtLoad, ParamRole::kWeightScale,
                               ParamRole::kWeightScaleParts, "", /*merged_keeps_parts=*/true});
  format.post = PostProcess::kFp8Quantize;
  return format;
}

}  // namespace shardload
