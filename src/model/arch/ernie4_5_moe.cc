// ERNIE-4.5-MoE: routed and shared experts; the optional moe_statics bias becomes the router's float32
// e_score_correction_bias, squeezed from [1, E] to [E]; multi-token-prediction tensors are skipped.
#include "model/arch_table.h"

namespace shardload::arch {

const ArchTable& ernie4_5_moe_table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), attention_rules(/*qk_norm=*/false), dense_mlp_rules(),
                       expert_rules("mlp.", "gate_proj", "up_proj", "down_proj"),
                       shared_expert_rules("mlp.shared_experts."),
                       {{.target = "mlp.gate.e_score_correction_bias",
                         .when = When::kMoeLayer,
                         .parts = {{"mlp.moe_statics.e_score_correction_bias", Split::kReplicated,
                                    [](const ModelConfig& m) { return Shape{1, m.experts}; }}},
                         .keep = Keep::kFloat32,
                         .optional = true,
                         .flatten = true}}}),
      .skips = [] {
        std::vector<SkipRule> skips = common_skips();
        skips.push_back({"multi-token-prediction tensors (names containing 'mtp')",
                         [](std::string_view name, const ModelConfig&) {
                           return name.find("mtp") != std::string_view::npos;
                         }});
        return skips;
      }(),
  };
  return table;
}

}  // namespace shardload::arch
