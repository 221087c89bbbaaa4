// Qwen3: per-head q/k RMS norms, kept in float32.
#include "model/arch_table.h"

namespace shardload::arch {

const ArchTable& qwen3_table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), attention_rules(/*qk_norm=*/true), dense_mlp_rules()}),
      .skips = common_skips(),
  };
  return table;
}

}  // namespace shardload::arch
