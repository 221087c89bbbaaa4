// Mixtral: every layer is MoE under block_sparse_moe, experts named w1 (gate), w3 (up), w2 (down).
#include "model/arch/family.h"
#include "model/config_fields.h"

namespace shardload::arch {
namespace {

const ArchTable& table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), attention_rules(/*qk_norm=*/false),
                       expert_rules("block_sparse_moe.", "w1", "w3", "w2")}),
      .skips = common_skips(),
  };
  return table;
}

void read_config(const nlohmann::json& c, ModelConfig& m) {
  m.experts = config::get_positive(c, "num_local_experts", std::nullopt, config::kMaxExperts);
  m.moe_intermediate = m.intermediate;
  m.moe_layer.assign(m.layers, true);
}

void tiny_config(const TinySizes& m, nlohmann::json& c) {
  tiny_rope(c, 1000000.0, 1e-5, 32768);
  c["attention_dropout"] = 0.0;
  c["num_local_experts"] = m.experts;
  c["num_experts_per_tok"] = m.experts_per_token;
  c["output_router_logits"] = false;
  c["router_aux_loss_coef"] = 0.02;
  c["sliding_window"] = nullptr;
}

void attention(const TinySizes& m, TensorWriter& w, const std::string& p) {
  write_attention(m, w, p, /*qkv_bias=*/false, /*qk_norm=*/false);
}

void moe(const TinySizes& m, TensorWriter& w, const std::string& layer) {
  const std::string b = layer + "block_sparse_moe.";
  w.weight(b + "gate.weight", {m.experts, m.hidden});
  write_w1_w3_w2_experts(m, w, b, m.intermediate);
}

bool moe_layer(const TinySizes&, int) { return true; }

void tiny_tensors(const TinySizes& m, TensorWriter& w) {
  write_decoder_model(m, w, {.attention = attention, .moe = moe, .moe_layer = moe_layer});
}

}  // namespace

const Family& mixtral_family() {
  static const Family family{
      .name = "mixtral",
      .architectures = {"MixtralForCausalLM"},
      .expert_count_field = "num_local_experts",
      .read_config = read_config,
      .table = table,
      .tiny_defaults =
          [](TinySizes& m) {
            m.intermediate = 256;
            m.layers = 2;
            tiny_add_experts(m, 2);
            m.moe_intermediate = 0;  // Mixtral's experts use intermediate_size
          },
      // No head_dim in the config, which is then hidden / heads: 512, so one layer keeps it small.
      .tiny_block_fp8 =
          [](TinySizes& m) {
            m.hidden = m.heads * m.head_dim;
            m.layers = 1;
            m.moe_intermediate = 0;
          },
      .tiny_moe_layer = moe_layer,
      .tiny_config = tiny_config,
      .tiny_tensors = tiny_tensors,
  };
  return family;
}

}  // namespace shardload::arch
