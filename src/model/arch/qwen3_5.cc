// Qwen3.5 / 3.6 (qwen3_5 dense, qwen3_5_moe): Qwen3-Next's hybrid layers (qwen3_next.cc) with the
// gated DeltaNet's input projections stored apart, as vLLM 0.33's qwen3_5.py loads them
// (docs/families/qwen3_5.md):
// - in_proj_qkv [2 kd + vd, H] (all q, then all k, then all v rows) and in_proj_z [vd, H] fill
//   vLLM's in_proj_qkvz, a MergedColumnParallelLinear of four outputs [kd, kd, vd, vd]: a rank holds its
//   share of q, of k, of v, then of z. in_proj_b and in_proj_a [nv, H] fill in_proj_ba [nv, nv] the
//   same way. (Qwen3-Next stores both fused by key-head group; the rank tensors differ in row
//   order.)
// - The text class (Qwen3_5ForCausalLM, model_type qwen3_5_text) names its tensors model.*; the
//   Hub's Qwen3_5(Moe)ForConditionalGeneration nests the text fields under text_config and names
//   the text model model.language_model.* beside the vision tower model.visual.* (skipped and
//   named); its lm_head and mtp.* keep their names.
// - The multi-token-prediction block mtp.* is skipped: vLLM's main model drops it (its
//   WeightsMapper maps "mtp." to None) and loads it only as a separate draft model.
// - qwen3_5_moe: every layer is MoE (vLLM's and transformers' Qwen3.5-MoE read no
//   decoder_sparse_step or mlp_only_layers), with Qwen3-Next's routed and shared experts. The routed
//   experts are read one a tensor (mlp.experts.{E}.gate_proj ...) or fused, as transformers 5 holds
//   them (Qwen3_5MoeExperts) and checkpoints saved from its state dict store them:
//   mlp.experts.gate_up_proj [E, 2I, H] (each expert's gate rows, then its up rows: [out, in], not
//   Llama-4's [in, out]) and mlp.experts.down_proj [E, H, I]; vLLM 0.33's FusedMoE takes them with
//   chunk(2, dim=1) and no transposition (its is_fused_checkpoint_transposed is false for this model).
//   The checkpoint's first MoE layer says which (Family::stacked_experts_tensor).
#include "model/arch/qwen3_next.h"
#include "model/config_fields.h"

namespace shardload::arch {
namespace {

using qwen3_next::key_dim;
using qwen3_next::value_dim;

Shape qkv_shape(const ModelConfig& m) { return {2 * key_dim(m) + value_dim(m), m.hidden}; }

// One row range of in_proj_qkv, split on its own over the attention ranks.
Part qkv_rows(RowRangeFn rows) {
  return {.source = "linear_attn.in_proj_qkv.weight",
          .split = Split::kColumn,
          .shape = qkv_shape,
          .rows = rows};
}

std::vector<ParamRule> separate_projection_rules() {
  const ShapeFn z = [](const ModelConfig& m) { return Shape{value_dim(m), m.hidden}; };
  const ShapeFn heads = [](const ModelConfig& m) { return Shape{m.linear_value_heads, m.hidden}; };
  return {
      {.target = "linear_attn.in_proj_qkvz.weight",
       .when = When::kLinearAttentionLayer,
       .parts = {qkv_rows([](const ModelConfig& m) {
                   return RowRange{0, key_dim(m)};
                 }),
                 qkv_rows([](const ModelConfig& m) {
                   return RowRange{key_dim(m), key_dim(m)};
                 }),
                 qkv_rows([](const ModelConfig& m) {
                   return RowRange{2 * key_dim(m), value_dim(m)};
                 }),
                 {"linear_attn.in_proj_z.weight", Split::kColumn, z}},
       .group = Group::kAttention},
      {.target = "linear_attn.in_proj_ba.weight",
       .when = When::kLinearAttentionLayer,
       .parts = {{"linear_attn.in_proj_b.weight", Split::kColumn, heads},
                 {"linear_attn.in_proj_a.weight", Split::kColumn, heads}},
       .group = Group::kAttention},
  };
}

// Qwen3-Next's MoE rules, the routed experts read one a tensor only where the checkpoint stores them so,
// and their fused 3-D tensors otherwise (the same rank tensors: w13 is each expert's gate rows then
// its up rows, each cut by MoE-TP; w2 its columns).
std::vector<ParamRule> moe_rules() {
  const ShapeFn gate_up = [](const ModelConfig& m) { return Shape{m.experts, 2 * m.moe_intermediate, m.hidden}; };
  const std::vector<ParamRule> stacked = {
      {.target = "mlp.experts.w13_weight",
       .when = When::kStackedExperts,
       .parts = {{.source = "mlp.experts.gate_up_proj", .split = Split::kColumn, .shape = gate_up, .stacked = true,
                  .band = Band::kFirstHalf},
                 {.source = "mlp.experts.gate_up_proj", .split = Split::kColumn, .shape = gate_up, .stacked = true,
                  .band = Band::kSecondHalf}},
       .group = Group::kExperts},
      {.target = "mlp.experts.w2_weight",
       .when = When::kStackedExperts,
       .parts = {{.source = "mlp.experts.down_proj", .split = Split::kRow,
                  .shape = [](const ModelConfig& m) { return Shape{m.experts, m.hidden, m.moe_intermediate}; },
                  .stacked = true}},
       .group = Group::kExperts},
  };
  // The stacked rules right after the per-expert ones: the rank tensors come in the same order either way.
  std::vector<ParamRule> rules;
  for (ParamRule& rule : qwen3_next::moe_rules()) {
    const bool experts = rule.group == Group::kExperts;
    if (experts) rule.when = When::kPerExpertTensors;
    const bool last = experts && rule.target == "mlp.experts.w2_weight";
    rules.push_back(std::move(rule));
    if (last) rules.insert(rules.end(), stacked.begin(), stacked.end());
  }
  return rules;
}

const ArchTable& table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), separate_projection_rules(), qwen3_next::delta_net_rules(),
                       qwen3_next::gated_attention_rules(), dense_mlp_rules(), moe_rules()}),
      .skips = qwen3_next::skips(),
  };
  return table;
}

void read_dense_config(const nlohmann::json& c, ModelConfig& m) {
  qwen3_next::read_hybrid_config(c, m);
}

void read_moe_config(const nlohmann::json& c, ModelConfig& m) {
  m.experts = config::get_uint(c, "num_experts", 0, config::kMaxExperts);
  if (m.experts > 0) {
    m.moe_intermediate = config::get_positive(c, "moe_intermediate_size");
    m.shared_intermediate = config::get_uint(c, "shared_expert_intermediate_size", 0);
    m.moe_layer.assign(m.moe_layer.size(), true);
  }
  qwen3_next::read_hybrid_config(c, m);
}

// make-tiny.

// transformers' Qwen3_5TextConfig / Qwen3_5MoeTextConfig fields (the text classes' model_type).
void tiny_config(const TinySizes& m, nlohmann::json& c, bool moe) {
  tiny_rope(c, 10000000.0, 1e-6, 262144);
  c["model_type"] = moe ? "qwen3_5_moe_text" : "qwen3_5_text";
  c["head_dim"] = m.head_dim;
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  nlohmann::json types = nlohmann::json::array();
  for (int i = 0; i < m.layers; ++i)
    types.push_back(qwen3_next::tiny_linear_layer(m, i) ? "linear_attention" : "full_attention");
  c["layer_types"] = types;
  qwen3_next::tiny_hybrid_config(m, c);
  c["mtp_num_hidden_layers"] = m.mtp_layers;
  if (!moe) return;
  c["num_experts"] = m.experts;
  c["num_experts_per_tok"] = m.experts_per_token;
  c["moe_intermediate_size"] = m.moe_intermediate;
  c["shared_expert_intermediate_size"] = m.shared_intermediate;
  c["norm_topk_prob"] = true;
  c["output_router_logits"] = false;
  c["router_aux_loss_coef"] = 0.001;
}

void linear_attention(const TinySizes& m, TensorWriter& w, const std::string& p) {
  const uint64_t keys = m.linear_key_heads * m.linear_key_head_dim;
  const uint64_t values = m.linear_value_heads * m.linear_value_head_dim;
  w.weight(p + "conv1d.weight", {2 * keys + values, 1, m.linear_conv_kernel});
  w.bias(p + "dt_bias", {m.linear_value_heads});
  w.bias(p + "A_log", {m.linear_value_heads});
  w.projection(p + "in_proj_qkv", 2 * keys + values, m.hidden);
  w.projection(p + "in_proj_z", values, m.hidden);
  // Never FP8: vLLM builds in_proj_ba without block FP8 and Qwen's FP8 checkpoints leave b and a in
  // bf16 (as Qwen3-Next's in_proj_ba).
  w.weight(p + "in_proj_b.weight", {m.linear_value_heads, m.hidden});
  w.weight(p + "in_proj_a.weight", {m.linear_value_heads, m.hidden});
  w.norm(p + "norm", m.linear_value_head_dim);
  w.projection(p + "out_proj", m.hidden, values);
}

void decoder_layer(const TinySizes& m, TensorWriter& w, const std::string& p, bool linear) {
  w.norm(p + "input_layernorm", m.hidden);
  if (linear) {
    linear_attention(m, w, p + "linear_attn.");
  } else {
    qwen3_next::write_gated_attention(m, w, p + "self_attn.");
  }
  w.norm(p + "post_attention_layernorm", m.hidden);
  if (m.experts > 0) {
    qwen3_next::write_moe(m, w, p + "mlp.");
  } else {
    write_mlp(m, w, p + "mlp.", m.intermediate);
  }
}

void tiny_tensors(const TinySizes& m, TensorWriter& w) {
  w.weight("model.embed_tokens.weight", {m.vocab, m.hidden});
  for (int i = 0; i < m.layers; ++i) {
    decoder_layer(m, w, "model.layers." + std::to_string(i) + ".", qwen3_next::tiny_linear_layer(m, i));
  }
  w.norm("model.norm", m.hidden);
  if (!m.tie_embeddings) w.weight("lm_head.weight", {m.vocab, m.hidden});
  // The multi-token-prediction block as the Hub checkpoints carry it (a full-attention layer fed by
  // the normed embedding and hidden state).
  for (int k = 0; k < m.mtp_layers; ++k) {
    w.weight("mtp.fc.weight",
             {m.hidden, 2 * m.hidden});  // not a *_proj: never FP8 (skipped anyway)
    w.norm("mtp.pre_fc_norm_embedding", m.hidden);
    w.norm("mtp.pre_fc_norm_hidden", m.hidden);
    decoder_layer(m, w, "mtp.layers." + std::to_string(k) + ".", /*linear=*/false);
    w.norm("mtp.norm", m.hidden);
  }
}

// A linear and a full layer; q, k, v and z are 4 x 128 or 8 x 128 rows, so every cut at tp 4
// (128 or 256 rows a part, out_proj's 256 columns) falls on a block; no MTP block, to stay small.
void tiny_block_fp8(TinySizes& m) {
  m.layers = 2;
  m.mtp_layers = 0;
  if (m.experts > 0) m.shared_intermediate = 4 * kFp8BlockSize;
  m.linear_key_heads = 4;
  m.linear_value_heads = 8;
  m.linear_key_head_dim = kFp8BlockSize;
  m.linear_value_head_dim = kFp8BlockSize;
}

bool every_layer_moe(const TinySizes& m, int) { return m.experts > 0; }

}  // namespace

const Family& qwen3_5_family() {
  static const Family family{
      .name = "qwen3_5",
      .architectures = {"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"},
      .expert_count_field = "",
      .read_config = read_dense_config,
      .table = table,
      .tiny_defaults = qwen3_next::tiny_hybrid_defaults,
      .tiny_block_fp8 = tiny_block_fp8,
      .tiny_moe_layer = tiny_no_moe_layer,
      .tiny_config = [](const TinySizes& m,
                        nlohmann::json& c) { tiny_config(m, c, /*moe=*/false); },
      .tiny_tensors = tiny_tensors,
      .multimodal_architecture = "Qwen3_5ForConditionalGeneration",
      .multimodal_weight_prefix = "model.language_model.",
      .multimodal_replaced_prefix = "model.",
  };
  return family;
}

const Family& qwen3_5_moe_family() {
  static const Family family{
      .name = "qwen3_5_moe",
      .architectures = {"Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"},
      .expert_count_field = "num_experts",
      .read_config = read_moe_config,
      .table = table,
      .tiny_defaults =
          [](TinySizes& m) {
            qwen3_next::tiny_hybrid_defaults(m);
            tiny_add_experts(m, 2);
            m.shared_intermediate = 128;
          },
      .tiny_block_fp8 = tiny_block_fp8,
      .tiny_moe_layer = every_layer_moe,
      .tiny_config = [](const TinySizes& m, nlohmann::json& c) { tiny_config(m, c, /*moe=*/true); },
      .tiny_tensors = tiny_tensors,
      .multimodal_architecture = "Qwen3_5MoeForConditionalGeneration",
      .multimodal_weight_prefix = "model.language_model.",
      .multimodal_replaced_prefix = "model.",
      .stacked_experts_tensor = "mlp.experts.gate_up_proj",
  };
  return family;
}

}  // namespace shardload::arch
