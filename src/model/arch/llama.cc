// Llama, Mistral and ERNIE-4.5 dense: attention with optional biases, a dense MLP.
#include "model/arch_table.h"

namespace shardload::arch {

const ArchTable& llama_table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), attention_rules(/*qk_norm=*/false), dense_mlp_rules()}),
      .skips = common_skips(),
  };
  return table;
}

}  // namespace shardload::arch
