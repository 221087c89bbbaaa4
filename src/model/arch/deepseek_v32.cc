// DeepSeek-V3.2 (DeepseekV32ForCausalLM): DeepSeek-V3 plus the sparse-attention indexer in every
// layer (self_attn.indexer., deepseek_indexer.cc), replicated on every rank.
#include "model/arch/deepseek.h"

namespace shardload::arch {
namespace {

void read_config(const nlohmann::json& c, ModelConfig& m) {
  deepseek::read_config(c, m);
  deepseek::read_indexer_config(c, m, "DeepSeek-V3.2");
}

constexpr TinyLayerWriter kLayer{.attention = deepseek::write_indexed_attention,
                                .moe = deepseek::write_moe_with_score_bias,
                                .moe_layer = deepseek::moe_layer};

}  // namespace

const Family& deepseek_v32_family() {
  static const Family family{
      .name = "deepseek_v32",
      .architectures = {"DeepseekV32ForCausalLM"},
      .expert_count_field = "n_routed_experts",
      .read_config = read_config,
      .table = deepseek::indexed_table,
      .tiny_defaults =
          [](TinySizes& m) {
            deepseek::tiny_defaults(m, /*v3=*/true);
            deepseek::tiny_indexer_defaults(m);
          },
      .tiny_block_fp8 =
          [](TinySizes& m) {
            deepseek::tiny_block_fp8(m);
            deepseek::tiny_indexer_block_fp8(m);
          },
      .tiny_moe_layer = deepseek::moe_layer,
      .tiny_config =
          [](const TinySizes& m, nlohmann::json& c) {
            deepseek::tiny_config(m, c, /*v3=*/true);
            deepseek::tiny_indexer_config(m, c);
          },
      .tiny_tensors = write_model_with_mtp<kLayer>,
  };
  return family;
}

}  // namespace shardload::arch
