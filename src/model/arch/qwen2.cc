// Qwen2: q/k/v biases always (ModelConfig::qkv_bias).
#include "model/arch_table.h"

namespace shardload::arch {

const ArchTable& qwen2_table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), attention_rules(/*qk_norm=*/false), dense_mlp_rules()}),
      .skips = common_skips(),
  };
  return table;
}

}  // namespace shardload::arch
