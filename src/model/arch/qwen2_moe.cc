// Qwen2-MoE: routed experts, one shared expert with a sigmoid gate, dense layers by mlp_only_layers and
// decoder_sparse_step.
#include "model/arch_table.h"

namespace shardload::arch {

const ArchTable& qwen2_moe_table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), attention_rules(/*qk_norm=*/false), dense_mlp_rules(),
                       expert_rules("mlp.", "gate_proj", "up_proj", "down_proj"),
                       shared_expert_rules("mlp.shared_expert."),
                       {{.target = "mlp.shared_expert_gate.weight",
                         .when = When::kMoeShared,
                         .parts = {{"mlp.shared_expert_gate.weight", Split::kReplicated,
                                    [](const ModelConfig& m) { return Shape{1, m.hidden}; }}}}}}),
      .skips = common_skips(),
  };
  return table;
}

}  // namespace shardload::arch
