// DeepSeek-V2 / V3: multi-head latent attention, shared experts, first_k_dense_replace dense layers; V3 adds
// the router's float32 score correction bias. Multi-token-prediction layers are skipped.
#include "model/arch_table.h"

namespace shardload::arch {
namespace {

std::vector<ParamRule> deepseek_layer(bool score_bias) {
  std::vector<ParamRule> rules =
      concat({norm_rules(), mla_rules(), dense_mlp_rules(),
              expert_rules("mlp.", "gate_proj", "up_proj", "down_proj"),
              shared_expert_rules("mlp.shared_experts.")});
  if (score_bias) {
    rules.push_back({.target = "mlp.gate.e_score_correction_bias",
                     .when = When::kMoeLayer,
                     .parts = {{"mlp.gate.e_score_correction_bias", Split::kReplicated,
                                [](const ModelConfig& m) { return Shape{m.experts}; }}},
                     .keep = Keep::kFloat32});
  }
  return rules;
}

std::vector<SkipRule> deepseek_skips() {
  std::vector<SkipRule> skips = common_skips();
  for (const SkipRule& skip : mtp_layer_skips()) skips.push_back(skip);
  return skips;
}

}  // namespace

const ArchTable& deepseek_v2_table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = deepseek_layer(/*score_bias=*/false),
      .skips = deepseek_skips(),
  };
  return table;
}

const ArchTable& deepseek_v3_table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = deepseek_layer(/*score_bias=*/true),
      .skips = deepseek_skips(),
  };
  return table;
}

}  // namespace shardload::arch
