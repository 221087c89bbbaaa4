// GLM-4.7-Flash (Glm4MoeLiteForCausalLM, glm4_moe_lite): DeepSeek-V3's multi-head latent attention,
// router with its float32 score-correction bias, routed and shared experts, under DeepSeek's tensor
// names; what differs is config.json (glm_mla.cc: mlp_layer_types beside first_k_dense_replace).
// Multi-token-prediction layers (num_nextn_predict_layers) are skipped, as vLLM's model does.
#include "model/arch/deepseek.h"
#include "model/arch/glm_mla.h"

namespace shardload::arch {
namespace {

// DeepSeek-V3's rules with the router kept float32: vLLM 0.33 (GLM-4-MoE's GateLinear) and SGLang hold it so,
// and transformers (5.25 measured) writes it so; the model dtype would round a float32 checkpoint's.
std::vector<ParamRule> layer_rules() {
  std::vector<ParamRule> rules = deepseek::layer_rules(/*score_bias=*/true);
  for (ParamRule& rule : rules) {
    if (rule.target == "mlp.gate.weight") rule.keep = Keep::kFloat32;
  }
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

constexpr TinyLayerWriter kLayer{
    .attention = write_latent_attention,
    .moe = [](const TinySizes& m, TensorWriter& w,
              const std::string& l) { deepseek::write_moe(m, w, l, true); },
    .moe_layer = glm_mla::moe_layer};

}  // namespace

const Family& glm4_moe_lite_family() {
  static const Family family{
      .name = "glm4_moe_lite",
      .architectures = {"Glm4MoeLiteForCausalLM"},
      .expert_count_field = "n_routed_experts",
      // transformers' Glm4MoeLiteConfig: layer 0 dense, the others MoE.
      .read_config = [](const nlohmann::json& c, ModelConfig& m) { glm_mla::read_config(c, m, 1); },
      .table = table,
      .tiny_defaults = glm_mla::tiny_defaults,
      .tiny_block_fp8 = deepseek::tiny_block_fp8,
      .tiny_moe_layer = glm_mla::moe_layer,
      .tiny_config = glm_mla::tiny_config,
      .tiny_tensors = write_model_with_mtp<kLayer>,
  };
  return family;
}

}  // namespace shardload::arch
