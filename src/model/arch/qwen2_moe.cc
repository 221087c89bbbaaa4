// Qwen2-MoE: routed experts, one shared expert with a sigmoid gate, dense layers by mlp_only_layers and
// decoder_sparse_step.
#include "model/arch/family.h"

namespace shardload::arch {
namespace {

const ArchTable& table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), attention_rules(/*qk_norm=*/false), dense_mlp_rules(),
                       expert_rules("mlp.", "gate_proj", "up_proj", "down_proj"),
                       shared_expert_rules("mlp.shared_expert."),
                       {{.target = "mlp.shared_expert_gate.weight",
                         .when = When::kMoeShared,
                         .parts = {{"mlp.shared_expert_gate.weight", Split::kReplicated,
                                    [](const ModelConfig& m) { return Shape{1, m.hidden}; }}}}}}),
      .skips = common_skips(),
  };
  return table;
}

void read_config(const nlohmann::json& c, ModelConfig& m) {
  m.qkv_bias = true;
  read_qwen_moe_config(c, m, /*shared_expert=*/true);
}

void tiny_config(const TinySizes& m, nlohmann::json& c) {
  tiny_qwen_config(c, m, 8192);
  tiny_qwen_moe_config(c, m);
  c["shared_expert_intermediate_size"] = m.shared_intermediate;
  c["norm_topk_prob"] = false;
}

void attention(const TinySizes& m, TensorWriter& w, const std::string& p) {
  write_attention(m, w, p, /*qkv_bias=*/true, /*qk_norm=*/false);
}

void moe(const TinySizes& m, TensorWriter& w, const std::string& layer) {
  const std::string p = layer + "mlp.";
  w.weight(p + "gate.weight", {m.experts, m.hidden});
  write_experts(m, w, p, m.moe_intermediate);
  write_mlp(m, w, p + "shared_expert.", m.shared_intermediate);
  w.weight(p + "shared_expert_gate.weight", {1, m.hidden});
}

void tiny_tensors(const TinySizes& m, TensorWriter& w) {
  write_decoder_model(m, w, {.attention = attention, .moe = moe, .moe_layer = tiny_qwen_moe_layer});
}

}  // namespace

const Family& qwen2_moe_family() {
  static const Family family{
      .name = "qwen2_moe",
      .architectures = {"Qwen2MoeForCausalLM"},
      .expert_count_field = "num_experts",
      .read_config = read_config,
      .table = table,
      .tiny_defaults =
          [](TinySizes& m) {
            m.intermediate = 256;
            tiny_add_experts(m, 2);
            m.shared_intermediate = 128;
          },
      // No head_dim in the config, which is then hidden / heads: 512, so one layer keeps it small.
      .tiny_block_fp8 =
          [](TinySizes& m) {
            m.hidden = m.heads * m.head_dim;
            m.layers = 1;
            m.shared_intermediate = 4 * kFp8BlockSize;
          },
      .tiny_moe_layer = tiny_qwen_moe_layer,
      .tiny_config = tiny_config,
      .tiny_tensors = tiny_tensors,
  };
  return family;
}

}  // namespace shardload::arch
