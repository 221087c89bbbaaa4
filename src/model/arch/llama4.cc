// Llama-4's text model (Llama4ForCausalLM; Llama4ForConditionalGeneration's language_model): GQA
// attention in every layer; MoE layers (every interleave_moe_layer_step-th, or config's moe_layers)
// with a top-k router, fused 3-D experts and one shared expert of intermediate_size; the other layers a
// dense MLP of intermediate_size_mlp. Everything sits under "feed_forward.".
//
// What differs from the other families, as vLLM and SGLang load it:
// - The experts are stored fused and [in, out]: gate_up_proj [E, H, 2I] (gate columns, then up) and
//   down_proj [E, I, H]. w13 takes each expert's gate and up halves transposed, split by MoE-TP as
//   any w1/w3; w2 takes down_proj transposed.
// - q_proj and k_proj rows are in interleaved rotary pairs (the reference rotates them as complex
//   numbers); the engines permute each head to its even rows then its odd rows at load time, for
//   their half-split rotary kernel. The rank's qkv_proj holds them permuted (every layer, the NoPE
//   layers too, as the engines do). The layers without RoPE and the weightless q/k L2 norms are
//   compute only: no tensor.
// - A multimodal checkpoint (Llama4ForConditionalGeneration) nests these fields under text_config
//   and names the text model's tensors under "language_model."; the rank tensors keep that prefix
//   (vLLM's mllama4 names), the vision tower and projector are skipped with a warning.
#include "model/arch/family.h"
#include "model/config_fields.h"
#include "shardload/error.h"

namespace shardload::arch {
namespace {

Shape q_shape(const ModelConfig& m) { return {m.heads * m.head_dim, m.hidden}; }
Shape kv_shape(const ModelConfig& m) { return {m.kv_heads * m.head_dim, m.hidden}; }

std::vector<ParamRule> attention() {
  return {
      {.target = "self_attn.qkv_proj.weight",
       .parts = {{.source = "self_attn.q_proj.weight", .split = Split::kColumn, .shape = q_shape,
                  .rotary_pairs = true},
                 {.source = "self_attn.k_proj.weight", .split = Split::kKvHeads, .shape = kv_shape,
                  .rotary_pairs = true},
                 {.source = "self_attn.v_proj.weight", .split = Split::kKvHeads, .shape = kv_shape}},
       .group = Group::kAttention},
      {.target = "self_attn.o_proj.weight",
       .parts = {{"self_attn.o_proj.weight", Split::kRow,
                  [](const ModelConfig& m) { return Shape{m.hidden, m.heads * m.head_dim}; }}},
       .group = Group::kAttention},
  };
}

std::vector<ParamRule> feed_forward() {
  const ShapeFn gate_up = [](const ModelConfig& m) { return Shape{m.experts, m.hidden, 2 * m.moe_intermediate}; };
  const ShapeFn dense = [](const ModelConfig& m) { return Shape{m.intermediate, m.hidden}; };
  std::vector<ParamRule> rules = {
      {.target = "feed_forward.router.weight",
       .when = When::kMoeLayer,
       .parts = {{"feed_forward.router.weight", Split::kReplicated,
                  [](const ModelConfig& m) { return Shape{m.experts, m.hidden}; }}}},
      {.target = "feed_forward.experts.w13_weight",
       .when = When::kMoeLayer,
       .parts = {{.source = "feed_forward.experts.gate_up_proj", .split = Split::kColumn, .shape = gate_up,
                  .stacked = true, .transposed = true, .band = Band::kFirstHalf},
                 {.source = "feed_forward.experts.gate_up_proj", .split = Split::kColumn, .shape = gate_up,
                  .stacked = true, .transposed = true, .band = Band::kSecondHalf}},
       .group = Group::kExperts},
      {.target = "feed_forward.experts.w2_weight",
       .when = When::kMoeLayer,
       .parts = {{.source = "feed_forward.experts.down_proj", .split = Split::kRow,
                  .shape = [](const ModelConfig& m) { return Shape{m.experts, m.moe_intermediate, m.hidden}; },
                  .stacked = true, .transposed = true}},
       .group = Group::kExperts},
      {.target = "feed_forward.gate_up_proj.weight",
       .when = When::kDenseMlpLayer,
       .parts = {{"feed_forward.gate_proj.weight", Split::kColumn, dense},
                 {"feed_forward.up_proj.weight", Split::kColumn, dense}},
       .group = Group::kDenseMlp},
      {.target = "feed_forward.down_proj.weight",
       .when = When::kDenseMlpLayer,
       .parts = {{"feed_forward.down_proj.weight", Split::kRow,
                  [](const ModelConfig& m) { return Shape{m.hidden, m.intermediate}; }}},
       .group = Group::kDenseMlp},
  };
  return concat({rules, shared_expert_rules("feed_forward.shared_expert.")});
}

const ArchTable& table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), attention(), feed_forward()}),
      .skips = common_skips(),
  };
  return table;
}

void read_config(const nlohmann::json& c, ModelConfig& m) {
  m.experts = config::get_positive(c, "num_local_experts", std::nullopt, config::kMaxExperts);
  m.moe_intermediate = config::get_positive(c, "intermediate_size");
  m.shared_intermediate = m.moe_intermediate;  // one shared expert as wide as a routed one
  m.intermediate = config::get_uint(c, "intermediate_size_mlp", 0);
  // transformers lists the MoE layers in moe_layers (derived from the step when absent); vLLM
  // derives them from the step: the two agree on every released config.
  const uint64_t step = config::get_positive(c, "interleave_moe_layer_step", 1);
  const auto listed = c.find("moe_layers");
  const bool has_list = listed != c.end() && listed->is_array();
  for (int i = 0; i < m.layers; ++i) {
    m.moe_layer[static_cast<size_t>(i)] =
        has_list ? config::in_list(c, "moe_layers", i) : (i + 1) % static_cast<int>(step) == 0;
  }
  if (m.intermediate == 0 && m.moe_layer_count() < m.layers) {
    throw config::config_error("dense layers need their MLP width", "intermediate_size_mlp", "a positive integer",
                               "absent");
  }
  if (m.attention_bias) {
    throw config::config_error("attention biases would need the rotary permutation too", "attention_bias",
                               "false", "true");
  }
}

void tiny_config(const TinySizes& m, nlohmann::json& c) {
  tiny_rope(c, 500000.0, 1e-5, 8192);
  c["model_type"] = "llama4_text";  // the text model's own type (Llama4ForCausalLM)
  c["head_dim"] = m.head_dim;
  c["intermediate_size"] = m.moe_intermediate;
  c["intermediate_size_mlp"] = m.intermediate;
  c["num_local_experts"] = m.experts;
  c["num_experts_per_tok"] = m.experts_per_token;
  c["interleave_moe_layer_step"] = m.sparse_step;
  c["attention_bias"] = false;
  c["attention_chunk_size"] = 8192;
  c["use_qk_norm"] = true;
  c["attn_temperature_tuning"] = true;
  c["floor_scale"] = 8192;
  c["attn_scale"] = 0.1;
  c["no_rope_layer_interval"] = 4;
  c["router_aux_loss_coef"] = 0.001;
  c["router_jitter_noise"] = 0.0;
  c["output_router_logits"] = false;
}

bool moe_layer(const TinySizes& m, int layer) { return (layer + 1) % m.sparse_step == 0; }

void tiny_tensors(const TinySizes& m, TensorWriter& w) {
  w.weight("model.embed_tokens.weight", {m.vocab, m.hidden});
  for (int i = 0; i < m.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    write_attention(m, w, p + "self_attn.", /*qkv_bias=*/false, /*qk_norm=*/false);
    const std::string f = p + "feed_forward.";
    if (moe_layer(m, i)) {
      w.weight(f + "router.weight", {m.experts, m.hidden});
      w.weight(f + "experts.gate_up_proj", {m.experts, m.hidden, 2 * m.moe_intermediate});
      w.weight(f + "experts.down_proj", {m.experts, m.moe_intermediate, m.hidden});
      write_mlp(m, w, f + "shared_expert.", m.moe_intermediate);
    } else {
      write_mlp(m, w, f, m.intermediate);
    }
    w.norm(p + "input_layernorm", m.hidden);
    w.norm(p + "post_attention_layernorm", m.hidden);
  }
  w.norm("model.norm", m.hidden);
  if (!m.tie_embeddings) w.weight("lm_head.weight", {m.vocab, m.hidden});
}

}  // namespace

const Family& llama4_family() {
  static const Family family{
      .name = "llama4",
      .architectures = {"Llama4ForCausalLM", "Llama4ForConditionalGeneration"},
      .expert_count_field = "num_local_experts",
      .read_config = read_config,
      .table = table,
      .tiny_defaults =
          [](TinySizes& m) {
            m.head_dim = 32;
            m.layers = 4;  // dense, MoE, dense, MoE (interleave_moe_layer_step 2, as Maverick)
            m.intermediate = 256;
            tiny_add_experts(m, 1);
            m.sparse_step = 2;
          },
      .tiny_block_fp8 = [](TinySizes&) {},
      .tiny_moe_layer = moe_layer,
      .tiny_config = tiny_config,
      .tiny_tensors = tiny_tensors,
      .multimodal_architecture = "Llama4ForConditionalGeneration",
      .multimodal_weight_prefix = "language_model.",
      .no_fp8_checkpoints = "the scales of its fused [in, out] experts and rotary-paired q/k would need the "
                            "same transposition and permutation (not supported yet)",
  };
  return family;
}

}  // namespace shardload::arch
