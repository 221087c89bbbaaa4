// Mixtral: every layer is MoE under block_sparse_moe, experts named w1 (gate), w3 (up), w2 (down).
#include "model/arch_table.h"

namespace shardload::arch {

const ArchTable& mixtral_table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), attention_rules(/*qk_norm=*/false),
                       expert_rules("block_sparse_moe.", "w1", "w3", "w2")}),
      .skips = common_skips(),
  };
  return table;
}

}  // namespace shardload::arch
