// Qwen3-MoE: q/k norms, routed experts without a shared expert.
#include "model/arch_table.h"

namespace shardload::arch {

const ArchTable& qwen3_moe_table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), attention_rules(/*qk_norm=*/true), dense_mlp_rules(),
                       expert_rules("mlp.", "gate_proj", "up_proj", "down_proj")}),
      .skips = common_skips(),
  };
  return table;
}

}  // namespace shardload::arch
