// MiniMax-M2 (MiniMaxM2ForCausalLM): every layer is full attention with GQA and MoE under
// block_sparse_moe (experts w1 gate, w3 up, w2 down of intermediate_size, as Mixtral), a sigmoid router
// with e_score_correction_bias, no shared expert. Its q/k norms are per layer ("qk_norm_type":
// "per_layer"): one RMSNorm over the whole q projection [heads * head_dim] and one over the whole k
// projection [kv_heads * head_dim], so at tensor parallelism they are split with the heads (vLLM's
// MiniMaxText01RMSNormTP, SGLang's MiniMaxM2RMSNormTP): q_norm like q_proj's rows, k_norm like k_proj's
// (a replicated kv head's slice when the ranks outnumber the kv heads). The router and the score bias
// are float32 on the Hub and in vLLM, and stay so. Multi-token-prediction layers are skipped.
#include <algorithm>

#include "model/arch/family.h"
#include "core/json_input.h"
#include "model/config_fields.h"
#include "shardload/error.h"

namespace shardload::arch {
namespace {

std::vector<ParamRule> layer_rules() {
  const ShapeFn q = [](const ModelConfig& m) { return Shape{m.heads * m.head_dim}; };
  const ShapeFn k = [](const ModelConfig& m) { return Shape{m.kv_heads * m.head_dim}; };
  std::vector<ParamRule> experts = expert_rules("block_sparse_moe.", "w1", "w3", "w2");
  for (ParamRule& rule : experts) {
    if (rule.target == "block_sparse_moe.gate.weight") rule.keep = Keep::kFloat32;
  }
  std::vector<ParamRule> rules = concat({norm_rules(), attention_rules(/*qk_norm=*/false), experts});
  // q/k norms as the engines keep q/k norms (float32, layout.md), split with the heads they normalize.
  rules.push_back({.target = "self_attn.q_norm.weight",
                   .parts = {{"self_attn.q_norm.weight", Split::kColumn, q}},
                   .group = Group::kAttention,
                   .keep = Keep::kFloat32});
  rules.push_back({.target = "self_attn.k_norm.weight",
                   .parts = {{"self_attn.k_norm.weight", Split::kKvHeads, k}},
                   .group = Group::kAttention,
                   .keep = Keep::kFloat32});
  rules.push_back({.target = "block_sparse_moe.e_score_correction_bias",
                   .when = When::kMoeLayer,
                   .parts = {{"block_sparse_moe.e_score_correction_bias", Split::kReplicated,
                              [](const ModelConfig& m) { return Shape{m.experts}; }}},
                   .keep = Keep::kFloat32});
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

Error unsupported(const char* field, std::string expected, std::string found) {
  return Error(ErrorKind::kConfig, "a MiniMax layout this family does not describe",
               {.file = "config.json", .field = field, .expected = std::move(expected), .found = std::move(found)});
}

void read_config(const nlohmann::json& c, ModelConfig& m) {
  m.experts = config::get_positive(c, "num_local_experts", std::nullopt, config::kMaxExperts);
  m.moe_intermediate = m.intermediate;  // every expert is intermediate_size wide
  m.moe_layer.assign(m.layers, true);
  // MiniMax-M1 / Text-01 (lightning attention layers, attn_type 0) and per-head q/k norms are other models.
  if (const auto types = c.find("attn_type_list"); types != c.end() && types->is_array()) {
    if (std::any_of(types->begin(), types->end(), [](const nlohmann::json& t) { return t != 1; })) {
      throw unsupported("attn_type_list", "1 (full attention) for every layer", "a layer of another type");
    }
  }
  // Compared as a std::string: `*type != "per_layer"` builds a temporary json, and g++ 12 at -O3 then
  // reports a false -Warray-bounds in nlohmann's operator== (an error under -Werror in Release builds).
  if (const auto type = c.find("qk_norm_type");
      type != c.end() && (!type->is_string() || type->get_ref<const std::string&>() != "per_layer")) {
    throw unsupported("qk_norm_type", "\"per_layer\"", brief_json(*type));
  }
  if (!config::get_bool(c, "use_qk_norm", true)) throw unsupported("use_qk_norm", "true", "false");
  if (const uint64_t shared = config::get_uint(c, "shared_intermediate_size", 0); shared != 0) {
    throw unsupported("shared_intermediate_size", "0 (no shared expert)", std::to_string(shared));
  }
}

void tiny_config(const TinySizes& m, nlohmann::json& c) {
  tiny_rope(c, 5000000.0, 1e-6, 196608);
  c["head_dim"] = m.head_dim;
  c["rotary_dim"] = m.head_dim / 2;
  c["attention_dropout"] = 0.0;
  c["num_local_experts"] = m.experts;
  c["num_experts_per_tok"] = m.experts_per_token;
  c["scoring_func"] = "sigmoid";
  c["use_routing_bias"] = true;
  c["use_qk_norm"] = true;
  c["qk_norm_type"] = "per_layer";
  c["shared_intermediate_size"] = 0;
  c["attn_type_list"] = std::vector<int>(static_cast<size_t>(m.layers), 1);
  c["output_router_logits"] = false;
  c["router_aux_loss_coef"] = 0.001;
  c["router_jitter_noise"] = 0.0;
}

void attention(const TinySizes& m, TensorWriter& w, const std::string& p) {
  write_attention(m, w, p, /*qkv_bias=*/false, /*qk_norm=*/false);
  w.norm(p + "q_norm", m.heads * m.head_dim);
  w.norm(p + "k_norm", m.kv_heads * m.head_dim);
}

void moe(const TinySizes& m, TensorWriter& w, const std::string& layer) {
  const std::string b = layer + "block_sparse_moe.";
  w.weight(b + "gate.weight", {m.experts, m.hidden}, DType::kF32);
  w.bias(b + "e_score_correction_bias", {m.experts}, DType::kF32);
  write_w1_w3_w2_experts(m, w, b, m.intermediate);
}

bool moe_layer(const TinySizes&, int) { return true; }

}  // namespace

const Family& minimax_m2_family() {
  static const Family family{
      .name = "minimax_m2",
      .architectures = {"MiniMaxM2ForCausalLM"},
      .expert_count_field = "num_local_experts",
      .read_config = read_config,
      .table = table,
      .tiny_defaults =
          [](TinySizes& m) {
            m.head_dim = 32;  // explicit, as in the real config (128 with hidden 3072 and 48 heads)
            m.intermediate = 256;
            m.layers = 2;
            tiny_add_experts(m, 2);
            m.moe_intermediate = 0;  // the experts use intermediate_size
          },
      .tiny_block_fp8 =
          [](TinySizes& m) {
            m.hidden = m.heads * m.head_dim;
            m.layers = 1;
            m.moe_intermediate = 0;
          },
      .tiny_moe_layer = moe_layer,
      .tiny_config = tiny_config,
      .tiny_tensors =
          [](const TinySizes& m, TensorWriter& w) {
            write_decoder_model(m, w, {.attention = attention, .moe = moe, .moe_layer = moe_layer});
          },
  };
  return family;
}

}  // namespace shardload::arch
