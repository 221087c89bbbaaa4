// DeepSeek-V2 / V3: multi-head latent attention, shared experts, first_k_dense_replace dense layers; V3 adds
// the router's float32 score correction bias. Multi-token-prediction layers are skipped.
#include "model/arch/deepseek.h"

#include "model/config_fields.h"

namespace shardload::arch {
namespace deepseek {

std::vector<ParamRule> layer_rules(bool score_bias) {
  std::vector<ParamRule> rules =
      concat({norm_rules(), mla_rules(), dense_mlp_rules(),
              expert_rules("mlp.", "gate_proj", "up_proj", "down_proj"),
              shared_expert_rules("mlp.shared_experts.")});
  if (score_bias) rules.push_back(score_correction_bias_rule());
  return rules;
}

void read_config(const nlohmann::json& c, ModelConfig& m) {
  m.q_lora_rank = config::get_uint(c, "q_lora_rank", 0);
  m.kv_lora_rank = config::get_positive(c, "kv_lora_rank");
  m.qk_nope_head_dim = config::get_positive(c, "qk_nope_head_dim");
  m.qk_rope_head_dim = config::get_positive(c, "qk_rope_head_dim");
  m.v_head_dim = config::get_positive(c, "v_head_dim");
  read_routed_moe_config(c, m);
}

TinySizes& tiny_defaults(TinySizes& m, bool v3) {
  m.kv_heads = m.heads;  // MLA checkpoints list num_key_value_heads = num_attention_heads
  m.head_dim = 0;        // DeepSeek configs have no head_dim
  tiny_add_experts(m, 2);
  m.shared_experts = v3 ? 1 : 2;
  m.first_moe_layer = 1;
  m.q_lora_rank = v3 ? 96 : 0;
  m.kv_lora_rank = 64;
  m.qk_nope_head_dim = 16;
  m.qk_rope_head_dim = 8;
  m.v_head_dim = 16;
  m.n_group = v3 ? 2 : 1;
  m.mtp_layers = v3 ? 1 : 0;
  return m;
}

// MLA with 8 heads, so that at tp 4 each rank's 2 heads of q (2 x 192 rows), kv_b (2 x 192 rows) and
// o_proj (2 x 64 columns) are whole blocks. kv_a_proj_with_mqa (128 + 64 rows) is replicated, so its
// partial edge block is never split; V3 fuses it after q_a (128 rows).
void tiny_block_fp8(TinySizes& m) {
  m.heads = 8;
  m.kv_heads = m.heads;
  m.head_dim = 0;
  m.qk_nope_head_dim = kFp8BlockSize;
  m.qk_rope_head_dim = kFp8BlockSize / 2;
  m.v_head_dim = kFp8BlockSize / 2;
  m.kv_lora_rank = kFp8BlockSize;
  m.q_lora_rank = m.q_lora_rank == 0 ? 0 : kFp8BlockSize;
  m.layers = 2;  // layer 0 dense, layer 1 MoE (and V3's MoE MTP layer)
}

void tiny_config(const TinySizes& m, nlohmann::json& c, bool v3) {
  tiny_rope(c, 10000.0, 1e-6, 163840);
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["pretraining_tp"] = 1;
  c["aux_loss_alpha"] = 0.001;
  c["ep_size"] = 1;
  tiny_routed_moe_config(c, m);
  c["moe_layer_freq"] = m.sparse_step;
  c["q_lora_rank"] = m.q_lora_rank == 0 ? nlohmann::json(nullptr) : nlohmann::json(m.q_lora_rank);
  c["kv_lora_rank"] = m.kv_lora_rank;
  c["qk_nope_head_dim"] = m.qk_nope_head_dim;
  c["qk_rope_head_dim"] = m.qk_rope_head_dim;
  c["v_head_dim"] = m.v_head_dim;
  c["norm_topk_prob"] = v3;
  c["routed_scaling_factor"] = v3 ? 2.5 : 1.0;
  c["scoring_func"] = v3 ? "sigmoid" : "softmax";
  c["topk_method"] = v3 ? "noaux_tc" : "greedy";
  c["seq_aux"] = true;
  const double mscale = v3 ? 1.0 : 0.707;
  c["rope_scaling"] = {
      {"type", "yarn"},          {"factor", 40},   {"original_max_position_embeddings", 4096},
      {"beta_fast", 32},         {"beta_slow", 1}, {"mscale", mscale},
      {"mscale_all_dim", mscale}};
  if (v3) c["num_nextn_predict_layers"] = m.mtp_layers;
}

bool moe_layer(const TinySizes& m, int layer) {
  return layer >= m.first_moe_layer && layer % m.sparse_step == 0;
}

void write_moe(const TinySizes& m, TensorWriter& w, const std::string& layer, bool score_bias) {
  const std::string p = layer + "mlp.";
  w.weight(p + "gate.weight", {m.experts, m.hidden});
  if (score_bias) w.bias(p + "gate.e_score_correction_bias", {m.experts}, DType::kF32);
  write_experts(m, w, p, m.moe_intermediate);
  write_mlp(m, w, p + "shared_experts.", m.shared_experts * m.moe_intermediate);
}

}  // namespace deepseek

namespace {

using namespace deepseek;

const ArchTable& v2_table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = layer_rules(/*score_bias=*/false),
      .skips = skips_with_mtp_layers(),
  };
  return table;
}

const ArchTable& v3_table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = layer_rules(/*score_bias=*/true),
      .skips = skips_with_mtp_layers(),
  };
  return table;
}

constexpr TinyLayerWriter kV2Layer{
    .attention = write_latent_attention,
    .moe = [](const TinySizes& m, TensorWriter& w, const std::string& l) { write_moe(m, w, l, false); },
    .moe_layer = moe_layer};
constexpr TinyLayerWriter kV3Layer{
    .attention = write_latent_attention,
    .moe = [](const TinySizes& m, TensorWriter& w, const std::string& l) { write_moe(m, w, l, true); },
    .moe_layer = moe_layer};

}  // namespace

const Family& deepseek_v2_family() {
  static const Family family{
      .name = "deepseek_v2",
      .architectures = {"DeepseekV2ForCausalLM"},
      .expert_count_field = "n_routed_experts",
      .read_config = read_config,
      .table = v2_table,
      .tiny_defaults = [](TinySizes& m) { tiny_defaults(m, /*v3=*/false); },
      .tiny_block_fp8 = tiny_block_fp8,
      .tiny_moe_layer = moe_layer,
      .tiny_config = [](const TinySizes& m, nlohmann::json& c) { tiny_config(m, c, /*v3=*/false); },
      .tiny_tensors = [](const TinySizes& m, TensorWriter& w) { write_decoder_model(m, w, kV2Layer); },
  };
  return family;
}

const Family& deepseek_v3_family() {
  static const Family family{
      .name = "deepseek_v3",
      .architectures = {"DeepseekV3ForCausalLM"},
      .expert_count_field = "n_routed_experts",
      .read_config = read_config,
      .table = v3_table,
      .tiny_defaults = [](TinySizes& m) { tiny_defaults(m, /*v3=*/true); },
      .tiny_block_fp8 = tiny_block_fp8,
      .tiny_moe_layer = moe_layer,
      .tiny_config = [](const TinySizes& m, nlohmann::json& c) { tiny_config(m, c, /*v3=*/true); },
      .tiny_tensors = write_model_with_mtp<kV3Layer>,
  };
  return family;
}

}  // namespace shardload::arch
