// gpt-oss's quant_method "mxfp4": the routed experts in MXFP4 as the Hub stores them (U8 codes and
// E8M0 scales in 32-value groups), everything else unquantized. The experts' rules keep the bytes as
// they are (Keep::kCheckpoint, cut on whole groups: src/model/arch/gpt_oss.cc), so the linear weights'
// format stays "none".
#include "model/quant/quantization_config.h"

namespace shardload {

void read_mxfp4(const nlohmann::json& /*quantization_config*/, ModelConfig& m) { m.mxfp4_experts = true; }

}  // namespace shardload
