// Qwen2: q/k/v biases always (ModelConfig::qkv_bias).
#include "model/arch/family.h"

namespace shardload::arch {
namespace {

const ArchTable& table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), attention_rules(/*qk_norm=*/false), dense_mlp_rules()}),
      .skips = common_skips(),
  };
  return table;
}

void attention(const TinySizes& m, TensorWriter& w, const std::string& p) {
  write_attention(m, w, p, /*qkv_bias=*/true, /*qk_norm=*/false);
}

void tiny_tensors(const TinySizes& m, TensorWriter& w) {
  write_decoder_model(m, w,
                      {.attention = attention, .moe = nullptr, .moe_layer = tiny_no_moe_layer});
}

}  // namespace

const Family& qwen2_family() {
  static const Family family{
      .name = "qwen2",
      .architectures = {"Qwen2ForCausalLM"},
      .expert_count_field = {},
      .read_config = [](const nlohmann::json&, ModelConfig& m) { m.qkv_bias = true; },
      .table = table,
      .tiny_defaults = [](TinySizes& m) { m.intermediate = 352; },
      // No head_dim in the config, which is then hidden / heads.
      .tiny_block_fp8 =
          [](TinySizes& m) {
            m.hidden = m.heads * m.head_dim;
            m.layers = 2;
          },
      .tiny_moe_layer = tiny_no_moe_layer,
      .tiny_config = [](const TinySizes& m, nlohmann::json& c) { tiny_qwen_config(c, m, 32768); },
      .tiny_tensors = tiny_tensors,
  };
  return family;
}

}  // namespace shardload::arch
