#include "model/arch_table.h"

#include <charconv>

namespace shardload::arch {
namespace {

uint64_t q_head_rows(const ModelConfig& m) { return m.heads * m.head_dim; }
uint64_t kv_head_rows(const ModelConfig& m) { return m.kv_heads * m.head_dim; }

}  // namespace

long layer_index(std::string_view name) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  name.remove_prefix(kPrefix.size());
  long index = -1;
  auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), index);
  if (ec != std::errc() || end == name.data() + name.size() || *end != '.') return -1;
  return index;
}

bool is_linear_weight(std::string_view target) {
  if (target.ends_with("experts.w13_weight") || target.ends_with("experts.w2_weight")) return true;
  if (!target.ends_with(".weight")) return false;
  target.remove_suffix(std::string_view(".weight").size());
  const size_t dot = target.rfind('.');
  const std::string_view module = dot == std::string_view::npos ? target : target.substr(dot + 1);
  // DeepSeek-V3.2's indexer: wq_b and wk are FP8 linears on the Hub, weights_proj stays BF16 (vLLM and
  // SGLang build it unquantized).
  if (target.ends_with("indexer.wq_b") || target.ends_with("indexer.wk")) return true;
  if (target.ends_with("indexer.weights_proj")) return false;
  // DeepSeek-V4's attention projections (vLLM's names; its compressors' fused_wkv_wgate stay BF16).
  if (target.ends_with("attn.fused_wqa_wkv") || target.ends_with("attn.wq_b") || target.ends_with("attn.wo_a") ||
      target.ends_with("attn.wo_b")) {
    return true;
  }
  // Qwen3-Next's b/a projection (Qwen3.5's in_proj_b and in_proj_a): its rows per rank (2 x value heads
  // / T) are below an FP8 block, and Qwen's FP8 checkpoints leave it in bf16 (modules_to_not_convert).
  if (target.ends_with("linear_attn.in_proj_ba") || target.ends_with("linear_attn.in_proj_b") ||
      target.ends_with("linear_attn.in_proj_a")) {
    return false;
  }
  // Gemma 4's per-layer inputs: the norm behind their projection (per_layer_projection_norm) is no
  // linear layer, and the small per-layer-input matrices stay in the model dtype, as per_layer_input_gate
  // (docs/families/gemma4.md).
  if (module.ends_with("norm") || module == "per_layer_projection" || module == "per_layer_model_projection") {
    return false;
  }
  return module.find("_proj") != std::string_view::npos;
}

std::vector<ParamRule> concat(std::initializer_list<std::vector<ParamRule>> blocks) {
  std::vector<ParamRule> out;
  for (const auto& block : blocks) out.insert(out.end(), block.begin(), block.end());
  return out;
}

std::vector<ParamRule> embedding_rules() {
  return {
      {.target = "model.embed_tokens.weight",
       .parts = {{"model.embed_tokens.weight", Split::kVocab,
                  [](const ModelConfig& m) { return Shape{m.vocab, m.hidden}; }}},
       .group = Group::kEmbedding},
      {.target = "model.norm.weight",
       .parts = {{"model.norm.weight", Split::kReplicated,
                  [](const ModelConfig& m) { return Shape{m.hidden}; }}}},
      {.target = "lm_head.weight",
       .when = When::kUntiedHead,
       .parts = {{"lm_head.weight", Split::kVocab,
                  [](const ModelConfig& m) { return Shape{m.vocab, m.hidden}; }}},
       .group = Group::kLmHead},
  };
}

std::vector<ParamRule> norm_rules() {
  const ShapeFn hidden = [](const ModelConfig& m) { return Shape{m.hidden}; };
  return {
      {.target = "input_layernorm.weight",
       .parts = {{"input_layernorm.weight", Split::kReplicated, hidden}}},
      {.target = "post_attention_layernorm.weight",
       .parts = {{"post_attention_layernorm.weight", Split::kReplicated, hidden}}},
  };
}

std::vector<ParamRule> attention_rules(bool qk_norm) {
  const ShapeFn q = [](const ModelConfig& m) { return Shape{q_head_rows(m), m.hidden}; };
  const ShapeFn kv = [](const ModelConfig& m) { return Shape{kv_head_rows(m), m.hidden}; };
  const ShapeFn q_bias = [](const ModelConfig& m) { return Shape{q_head_rows(m)}; };
  const ShapeFn kv_bias = [](const ModelConfig& m) { return Shape{kv_head_rows(m)}; };
  std::vector<ParamRule> rules = {
      {.target = "self_attn.qkv_proj.weight",
       .parts = {{"self_attn.q_proj.weight", Split::kColumn, q},
                 {"self_attn.k_proj.weight", Split::kKvHeads, kv},
                 {"self_attn.v_proj.weight", Split::kKvHeads, kv}},
       .group = Group::kAttention},
      {.target = "self_attn.qkv_proj.bias",
       .when = When::kQkvBias,
       .parts = {{"self_attn.q_proj.bias", Split::kColumn, q_bias},
                 {"self_attn.k_proj.bias", Split::kKvHeads, kv_bias},
                 {"self_attn.v_proj.bias", Split::kKvHeads, kv_bias}},
       .group = Group::kAttention},
      {.target = "self_attn.o_proj.weight",
       .parts = {{"self_attn.o_proj.weight", Split::kRow,
                  [](const ModelConfig& m) { return Shape{m.hidden, q_head_rows(m)}; }}},
       .group = Group::kAttention},
      {.target = "self_attn.o_proj.bias",
       .when = When::kAttentionBias,
       .parts = {{"self_attn.o_proj.bias", Split::kRowBias,
                  [](const ModelConfig& m) { return Shape{m.hidden}; }}},
       .group = Group::kAttention},
  };
  if (qk_norm) {
    const ShapeFn head = [](const ModelConfig& m) { return Shape{m.head_dim}; };
    rules.push_back({.target = "self_attn.q_norm.weight",
                     .parts = {{"self_attn.q_norm.weight", Split::kReplicated, head}},
                     .keep = Keep::kFloat32});
    rules.push_back({.target = "self_attn.k_norm.weight",
                     .parts = {{"self_attn.k_norm.weight", Split::kReplicated, head}},
                     .keep = Keep::kFloat32});
  }
  return rules;
}

std::vector<ParamRule> mla_rules() {
  const ShapeFn q_a = [](const ModelConfig& m) { return Shape{m.q_lora_rank, m.hidden}; };
  const ShapeFn kv_a = [](const ModelConfig& m) {
    return Shape{m.kv_lora_rank + m.qk_rope_head_dim, m.hidden};
  };
  return {
      {.target = "self_attn.fused_qkv_a_proj.weight",
       .when = When::kQLora,
       .parts = {{"self_attn.q_a_proj.weight", Split::kReplicated, q_a},
                 {"self_attn.kv_a_proj_with_mqa.weight", Split::kReplicated, kv_a}}},
      {.target = "self_attn.q_a_layernorm.weight",
       .when = When::kQLora,
       .parts = {{"self_attn.q_a_layernorm.weight", Split::kReplicated,
                  [](const ModelConfig& m) { return Shape{m.q_lora_rank}; }}}},
      {.target = "self_attn.q_b_proj.weight",
       .when = When::kQLora,
       .parts = {{"self_attn.q_b_proj.weight", Split::kColumn,
                  [](const ModelConfig& m) {
                    return Shape{m.heads * (m.qk_nope_head_dim + m.qk_rope_head_dim), m.q_lora_rank};
                  }}},
       .group = Group::kAttention},
      {.target = "self_attn.q_proj.weight",
       .when = When::kNoQLora,
       .parts = {{"self_attn.q_proj.weight", Split::kColumn,
                  [](const ModelConfig& m) {
                    return Shape{m.heads * (m.qk_nope_head_dim + m.qk_rope_head_dim), m.hidden};
                  }}},
       .group = Group::kAttention},
      {.target = "self_attn.kv_a_proj_with_mqa.weight",
       .when = When::kNoQLora,
       .parts = {{"self_attn.kv_a_proj_with_mqa.weight", Split::kReplicated, kv_a}}},
      {.target = "self_attn.kv_a_layernorm.weight",
       .parts = {{"self_attn.kv_a_layernorm.weight", Split::kReplicated,
                  [](const ModelConfig& m) { return Shape{m.kv_lora_rank}; }}}},
      {.target = "self_attn.kv_b_proj.weight",
       .parts = {{"self_attn.kv_b_proj.weight", Split::kColumn,
                  [](const ModelConfig& m) {
                    return Shape{m.heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank};
                  }}},
       .group = Group::kAttention},
      {.target = "self_attn.o_proj.weight",
       .parts = {{"self_attn.o_proj.weight", Split::kRow,
                  [](const ModelConfig& m) { return Shape{m.hidden, m.heads * m.v_head_dim}; }}},
       .group = Group::kAttention},
  };
}

std::vector<ParamRule> dense_mlp_rules() {
  const ShapeFn up = [](const ModelConfig& m) { return Shape{m.intermediate, m.hidden}; };
  const ShapeFn up_bias = [](const ModelConfig& m) { return Shape{m.intermediate}; };
  return {
      {.target = "mlp.gate_up_proj.weight",
       .when = When::kDenseMlpLayer,
       .parts = {{"mlp.gate_proj.weight", Split::kColumn, up},
                 {"mlp.up_proj.weight", Split::kColumn, up}},
       .group = Group::kDenseMlp},
      {.target = "mlp.down_proj.weight",
       .when = When::kDenseMlpLayer,
       .parts = {{"mlp.down_proj.weight", Split::kRow,
                  [](const ModelConfig& m) { return Shape{m.hidden, m.intermediate}; }}},
       .group = Group::kDenseMlp},
      {.target = "mlp.gate_up_proj.bias",
       .when = When::kMlpBias,
       .parts = {{"mlp.gate_proj.bias", Split::kColumn, up_bias},
                 {"mlp.up_proj.bias", Split::kColumn, up_bias}},
       .group = Group::kDenseMlp},
      {.target = "mlp.down_proj.bias",
       .when = When::kMlpBias,
       .parts = {{"mlp.down_proj.bias", Split::kRowBias,
                  [](const ModelConfig& m) { return Shape{m.hidden}; }}},
       .group = Group::kDenseMlp},
  };
}

std::vector<ParamRule> expert_rules(const std::string& module, const std::string& gate,
                                    const std::string& up, const std::string& down) {
  const ShapeFn in = [](const ModelConfig& m) { return Shape{m.moe_intermediate, m.hidden}; };
  const std::string expert = module + "experts.{E}.";
  return {
      {.target = module + "gate.weight",
       .when = When::kMoeLayer,
       .parts = {{module + "gate.weight", Split::kReplicated,
                  [](const ModelConfig& m) { return Shape{m.experts, m.hidden}; }}}},
      {.target = module + "experts.w13_weight",
       .when = When::kMoeLayer,
       .parts = {{expert + gate + ".weight", Split::kColumn, in},
                 {expert + up + ".weight", Split::kColumn, in}},
       .group = Group::kExperts},
      {.target = module + "experts.w2_weight",
       .when = When::kMoeLayer,
       .parts = {{expert + down + ".weight", Split::kRow,
                  [](const ModelConfig& m) { return Shape{m.hidden, m.moe_intermediate}; }}},
       .group = Group::kExperts},
  };
}

std::vector<ParamRule> shared_expert_rules(const std::string& name) {
  const ShapeFn in = [](const ModelConfig& m) { return Shape{m.shared_intermediate, m.hidden}; };
  return {
      {.target = name + "gate_up_proj.weight",
       .when = When::kMoeShared,
       .parts = {{name + "gate_proj.weight", Split::kColumn, in},
                 {name + "up_proj.weight", Split::kColumn, in}},
       .group = Group::kSharedExperts},
      {.target = name + "down_proj.weight",
       .when = When::kMoeShared,
       .parts = {{name + "down_proj.weight", Split::kRow,
                  [](const ModelConfig& m) { return Shape{m.hidden, m.shared_intermediate}; }}},
       .group = Group::kSharedExperts},
  };
}

std::vector<SkipRule> common_skips() {
  return {
      {"rotary embedding buffers are recomputed by the engine",
       [](std::string_view name, const ModelConfig&) {
         return name.ends_with("rotary_emb.inv_freq") || name.ends_with("rotary_emb.cos_cached") ||
                name.ends_with("rotary_emb.sin_cached");
       }},
      {"lm_head is tied to the embeddings",
       [](std::string_view name, const ModelConfig& m) {
         return m.tie_embeddings && name == "lm_head.weight";
       }},
  };
}

std::vector<SkipRule> skips_with_mtp_layers() {
  std::vector<SkipRule> skips = common_skips();
  skips.push_back({"multi-token-prediction layers (index >= num_hidden_layers)",
                   [](std::string_view name, const ModelConfig& m) { return layer_index(name) >= m.layers; }});
  return skips;
}

}  // namespace shardload::arch
