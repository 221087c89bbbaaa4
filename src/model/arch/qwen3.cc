// Qwen3: per-head q/k RMS norms, kept in float32.
#include "model/arch/family.h"

namespace shardload::arch {
namespace {

const ArchTable& table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), attention_rules(/*qk_norm=*/true), dense_mlp_rules()}),
      .skips = common_skips(),
  };
  return table;
}

void attention(const TinySizes& m, TensorWriter& w, const std::string& p) {
  write_attention(m, w, p, /*qkv_bias=*/false, /*qk_norm=*/true);
}

void tiny_tensors(const TinySizes& m, TensorWriter& w) {
  write_decoder_model(m, w,
                      {.attention = attention, .moe = nullptr, .moe_layer = tiny_no_moe_layer});
}

}  // namespace

const Family& qwen3_family() {
  static const Family family{
      .name = "qwen3",
      .architectures = {"Qwen3ForCausalLM"},
      .expert_count_field = {},
      .read_config = [](const nlohmann::json&, ModelConfig&) {},
      .table = table,
      .tiny_defaults =
          [](TinySizes& m) {
            m.head_dim = 32;  // explicit and != hidden / heads, as in the real Qwen3 configs
            m.tie_embeddings = true;
          },
      .tiny_block_fp8 = [](TinySizes&) {},
      .tiny_moe_layer = tiny_no_moe_layer,
      .tiny_config =
          [](const TinySizes& m, nlohmann::json& c) {
            tiny_qwen_config(c, m, 40960);
            tiny_qwen3_config(c, m);
          },
      .tiny_tensors = tiny_tensors,
  };
  return family;
}

}  // namespace shardload::arch
