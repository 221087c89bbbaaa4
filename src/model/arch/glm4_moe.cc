// GLM-4.5 / GLM-4.6 MoE (Glm4MoeForCausalLM): grouped-query attention whose attention_bias biases
// q, k and v only (o_proj has none), per-head q/k norms when use_qk_norm, first_k_dense_replace
// dense layers, then routed experts with a float32 e_score_correction_bias and n_shared_experts
// shared experts (DeepSeek-V3's router and experts). Multi-token-prediction layers are skipped.
#include "model/arch/family.h"
#include "model/config_fields.h"

namespace shardload::arch {
namespace {

std::vector<ParamRule> layer_rules() {
  std::vector<ParamRule> attention = attention_rules(/*qk_norm=*/true);
  // use_qk_norm is off in GLM-4.5-Air: its q/k norms are taken when the checkpoint has them.
  for (ParamRule& rule : attention) {
    if (rule.target.ends_with("_norm.weight")) rule.optional = true;
  }
  std::vector<ParamRule> experts = expert_rules("mlp.", "gate_proj", "up_proj", "down_proj");
  // The router kept float32: vLLM 0.33 (its GateLinear) and SGLang hold it so, and transformers 5 writes it so;
  // the model dtype would round a float32 checkpoint's.
  for (ParamRule& rule : experts) {
    if (rule.target == "mlp.gate.weight") rule.keep = Keep::kFloat32;
  }
  std::vector<ParamRule> rules = concat({norm_rules(), attention, dense_mlp_rules(), experts,
                                         shared_expert_rules("mlp.shared_experts.")});
  rules.push_back(score_correction_bias_rule());
  return rules;
}

const ArchTable& table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = layer_rules(),
      .skips = skips_with_mtp_layers(),
  };
  return table;
}

void read_config(const nlohmann::json& c, ModelConfig& m) {
  m.qkv_bias = m.attention_bias;  // attention_bias: q/k/v biases, never o_proj's
  m.attention_bias = false;
  read_routed_moe_config(c, m);
}

void tiny_defaults(TinySizes& m) {
  m.head_dim = 32;  // explicit and != hidden / heads, as in the real configs (128 with 96 heads)
  tiny_add_experts(m, 2);
  m.shared_experts = 1;
  m.first_moe_layer = 1;
  m.mtp_layers = 1;
}

void tiny_config(const TinySizes& m, nlohmann::json& c) {
  tiny_rope(c, 1000000.0, 1e-5, 131072);
  c["head_dim"] = m.head_dim;
  c["partial_rotary_factor"] = 0.5;
  c["attention_bias"] = true;
  c["attention_dropout"] = 0.0;
  c["use_qk_norm"] = true;
  c["pad_token_id"] = kTinyPadTokenId;
  tiny_routed_moe_config(c, m);
  c["norm_topk_prob"] = true;
  c["routed_scaling_factor"] = 2.5;
  c["num_nextn_predict_layers"] = m.mtp_layers;
  c["rope_scaling"] = nullptr;
}

void attention(const TinySizes& m, TensorWriter& w, const std::string& p) {
  write_attention(m, w, p, /*qkv_bias=*/true, /*qk_norm=*/true);
}

void moe(const TinySizes& m, TensorWriter& w, const std::string& layer) {
  const std::string p = layer + "mlp.";
  w.weight(p + "gate.weight", {m.experts, m.hidden});
  w.bias(p + "gate.e_score_correction_bias", {m.experts}, DType::kF32);
  write_experts(m, w, p, m.moe_intermediate);
  write_mlp(m, w, p + "shared_experts.", m.shared_experts * m.moe_intermediate);
}

bool moe_layer(const TinySizes& m, int layer) { return layer >= m.first_moe_layer; }

constexpr TinyLayerWriter kLayer{.attention = attention, .moe = moe, .moe_layer = moe_layer};

}  // namespace

const Family& glm4_moe_family() {
  static const Family family{
      .name = "glm4_moe",
      .architectures = {"Glm4MoeForCausalLM"},
      .expert_count_field = "n_routed_experts",
      .read_config = read_config,
      .table = table,
      .tiny_defaults = tiny_defaults,
      // Layer 0 dense (first_k_dense_replace), layer 1 MoE, and the MoE MTP layer.
      .tiny_block_fp8 = [](TinySizes& m) { m.layers = 2; },
      .tiny_moe_layer = moe_layer,
      .tiny_config = tiny_config,
      .tiny_tensors = write_model_with_mtp<kLayer>,
  };
  return family;
}

}  // namespace shardload::arch
