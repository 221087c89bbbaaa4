// ERNIE-4.5-MoE: routed and shared experts; a float32 router; the optional moe_statics bias becomes the
// router's float32 e_score_correction_bias, squeezed from [1, E] to [E]; multi-token-prediction
// tensors are skipped.
#include "model/arch/family.h"
#include "model/config_fields.h"

namespace shardload::arch {
namespace {

// The router as the Hub's checkpoints store it and as vLLM and FastDeploy hold it: float32 (SGLang
// holds it in the model dtype; its export casts, docs/engines.md).
std::vector<ParamRule> experts() {
  std::vector<ParamRule> rules = expert_rules("mlp.", "gate_proj", "up_proj", "down_proj");
  for (ParamRule& rule : rules) {
    if (rule.target == "mlp.gate.weight") rule.keep = Keep::kFloat32;
  }
  return rules;
}

const ArchTable& table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), attention_rules(/*qk_norm=*/false), dense_mlp_rules(), experts(),
                       shared_expert_rules("mlp.shared_experts."),
                       {{.target = "mlp.gate.e_score_correction_bias",
                         .when = When::kMoeLayer,
                         .parts = {{"mlp.moe_statics.e_score_correction_bias", Split::kReplicated,
                                    [](const ModelConfig& m) { return Shape{1, m.experts}; }}},
                         .keep = Keep::kFloat32,
                         .optional = true,
                         .flatten = true}}}),
      .skips = [] {
        std::vector<SkipRule> skips = common_skips();
        skips.push_back({"multi-token-prediction tensors (names containing 'mtp')",
                         [](std::string_view name, const ModelConfig&) {
                           return name.find("mtp") != std::string_view::npos;
                         }});
        return skips;
      }(),
  };
  return table;
}

void read_config(const nlohmann::json& c, ModelConfig& m) {
  using namespace config;
  const int n = m.layers;
  m.experts = get_uint(c, "moe_num_experts", 0, kMaxExperts);
  if (m.experts == 0 || !get_bool(c, "use_moe", true)) {
    m.experts = 0;
    return;
  }
  m.moe_intermediate = get_positive(c, "moe_intermediate_size");
  m.shared_intermediate =
      m.moe_intermediate * get_uint(c, "moe_num_shared_experts", 0, kMaxSharedExperts);
  const uint64_t start = get_uint(c, "moe_layer_start_index", 0);
  const uint64_t end = get_uint(c, "moe_layer_end_index", n - 1);
  const uint64_t interval = get_positive(c, "moe_layer_interval", 1);
  for (int i = 0; i < n; ++i) {
    const uint64_t u = static_cast<uint64_t>(i);
    m.moe_layer[i] = (u + 1) % interval == 0 && start <= u && u <= end;
  }
}

void tiny_config(const TinySizes& m, nlohmann::json& c) {
  tiny_rope(c, 500000.0, 1e-5, 131072);
  c["head_dim"] = m.head_dim;
  c["pad_token_id"] = kTinyPadTokenId;
  c["use_bias"] = false;
  c["use_rmsnorm"] = true;
  c["use_moe"] = m.experts > 0;
  c["moe_num_experts"] = m.experts;
  c["moe_k"] = m.experts_per_token;
  c["moe_intermediate_size"] = m.moe_intermediate;
  c["moe_num_shared_experts"] = m.shared_experts;
  c["moe_layer_start_index"] = m.first_moe_layer;
  c["moe_layer_end_index"] = m.layers - 1;
  c["moe_layer_interval"] = m.sparse_step;
  c["moe_capacity"] = nlohmann::json::array({m.experts, m.experts, m.experts});
  c["moe_gate"] = "topk";
  c["moe_use_aux_free"] = true;
  c["num_nextn_predict_layers"] = m.mtp_layers;
}

void attention(const TinySizes& m, TensorWriter& w, const std::string& p) {
  write_attention(m, w, p, /*qkv_bias=*/false, /*qk_norm=*/false);
}

void moe(const TinySizes& m, TensorWriter& w, const std::string& layer) {
  const std::string p = layer + "mlp.";
  // ERNIE keeps its router and the aux-free bias in float32 on disk.
  w.weight(p + "gate.weight", {m.experts, m.hidden}, DType::kF32);
  write_experts(m, w, p, m.moe_intermediate);
  write_mlp(m, w, p + "shared_experts.", m.shared_experts * m.moe_intermediate);
  w.bias(p + "moe_statics.e_score_correction_bias", {1, m.experts}, DType::kF32);
}

bool moe_layer(const TinySizes& m, int layer) {
  return (layer + 1) % m.sparse_step == 0 && layer >= m.first_moe_layer && layer < m.layers;
}

// Multi-token prediction: indexed top-level modules whose names contain "mtp"; the block is a plain
// dense decoder layer.
void mtp(const TinySizes& m, TensorWriter& w) {
  for (int k = 0; k < m.mtp_layers; ++k) {
    const std::string i = std::to_string(k);
    w.norm("model.mtp_emb_norm." + i, m.hidden);
    w.norm("model.mtp_hidden_norm." + i, m.hidden);
    // Not FP8 under --quant: loaders skip every mtp tensor, and the generator has always kept this
    // one (whose last name component is the index, not "*_proj") in bf16.
    w.weight("model.mtp_linear_proj." + i + ".weight", {m.hidden, 2 * m.hidden});
    const std::string p = "model.mtp_block." + i + ".";
    w.norm(p + "input_layernorm", m.hidden);
    attention(m, w, p + "self_attn.");
    w.norm(p + "post_attention_layernorm", m.hidden);
    write_mlp(m, w, p + "mlp.", m.intermediate);
  }
}

void tiny_tensors(const TinySizes& m, TensorWriter& w) {
  write_decoder_model(m, w, {.attention = attention, .moe = moe, .moe_layer = moe_layer});
  mtp(m, w);
}

}  // namespace

const Family& ernie4_5_moe_family() {
  static const Family family{
      .name = "ernie4_5_moe",
      .architectures = {"Ernie4_5_MoeForCausalLM"},
      .expert_count_field = "moe_num_experts",
      .read_config = read_config,
      .table = table,
      .tiny_defaults =
          [](TinySizes& m) {
            tiny_add_experts(m, 2);
            m.shared_experts = 2;
            m.first_moe_layer = 1;
            m.tie_embeddings = true;
            m.mtp_layers = 1;
          },
      // Layer 0 dense (moe_layer_start_index), layer 1 MoE.
      .tiny_block_fp8 = [](TinySizes& m) { m.layers = 2; },
      .tiny_moe_layer = moe_layer,
      .tiny_config = tiny_config,
      .tiny_tensors = tiny_tensors,
  };
  return family;
}

}  // namespace shardload::arch
