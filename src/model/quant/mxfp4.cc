// MXFP4 routed experts: gpt-oss's quant_method "mxfp4" (U8 codes and E8M0 scales in 32-value groups as
// the Hub stores them, everything else unquantized) and DeepSeek-V4's expert_dtype "fp4" (its family
// reads that and points the config here). The experts are kept as stored (ExpertFormat): the family's
// stored-experts rules cut codes and scales on whole groups (src/model/arch/gpt_oss.cc, deepseek_v4.cc),
// and the linear weights' format stays "none" (or, for DeepSeek-V4, its block FP8).
#include "model/quant/mxfp4.h"

#include "model/quant/quantization_config.h"

namespace shardload {

const ExpertFormat& mxfp4_format() {
  static constexpr ExpertFormat kMxfp4{.name = "MXFP4",
                                       .group = 32,
                                       .values_per_byte = 2,
                                       .scale_dtype = DType::kF8E8M0,
                                       .groups_name = "MXFP4 32-value groups"};
  return kMxfp4;
}

void read_mxfp4(const nlohmann::json& /*quantization_config*/, ModelConfig& m) { m.expert_format = &mxfp4_format(); }

}  // namespace shardload
