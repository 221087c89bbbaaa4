// Qwen3-MoE: q/k norms, routed experts without a shared expert.
#include "model/arch/family.h"

namespace shardload::arch {
namespace {

const ArchTable& table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), attention_rules(/*qk_norm=*/true), dense_mlp_rules(),
                       expert_rules("mlp.", "gate_proj", "up_proj", "down_proj")}),
      .skips = common_skips(),
  };
  return table;
}

void tiny_config(const TinySizes& m, nlohmann::json& c) {
  tiny_qwen_config(c, m, 40960);
  tiny_qwen3_config(c, m);
  tiny_qwen_moe_config(c, m);
  c["norm_topk_prob"] = true;
}

void attention(const TinySizes& m, TensorWriter& w, const std::string& p) {
  write_attention(m, w, p, /*qkv_bias=*/false, /*qk_norm=*/true);
}

void moe(const TinySizes& m, TensorWriter& w, const std::string& layer) {
  const std::string p = layer + "mlp.";
  w.weight(p + "gate.weight", {m.experts, m.hidden});
  write_experts(m, w, p, m.moe_intermediate);
}

void tiny_tensors(const TinySizes& m, TensorWriter& w) {
  write_decoder_model(m, w, {.attention = attention, .moe = moe, .moe_layer = tiny_qwen_moe_layer});
}

}  // namespace

const Family& qwen3_moe_family() {
  static const Family family{
      .name = "qwen3_moe",
      .architectures = {"Qwen3MoeForCausalLM"},
      .expert_count_field = "num_experts",
      .read_config = [](const nlohmann::json& c,
                        ModelConfig& m) { read_qwen_moe_config(c, m, /*shared_expert=*/false); },
      .table = table,
      .tiny_defaults =
          [](TinySizes& m) {
            m.head_dim = 32;
            m.layers = 4;
            tiny_add_experts(m, 2);
            m.mlp_only_layers = {0};
          },
      // Layer 0 dense (mlp_only_layers), layer 1 MoE.
      .tiny_block_fp8 = [](TinySizes& m) { m.layers = 2; },
      .tiny_moe_layer = tiny_qwen_moe_layer,
      .tiny_config = tiny_config,
      .tiny_tensors = tiny_tensors,
  };
  return family;
}

}  // namespace shardload::arch
