// DeepSeek-V3.2's sparse-attention indexer (self_attn.indexer.), shared by deepseek_v32.cc and
// GLM-5 (glm_moe_dsa.cc): wq_b [index_n_heads * index_head_dim, q_lora_rank] and wk
// [index_head_dim, H] (FP8 on the Hub), the LayerNorm k_norm (weight and bias) and weights_proj
// [index_n_heads, H] (BF16). vLLM and SGLang replicate all of them on every rank: the indexer
// scores tokens per rank, it is not split with the attention heads. Its names stay the
// checkpoint's, as SGLang and vLLM before its wk + weights_proj fusion keep them
// (docs/families/deepseek_v32.md).
#include "model/arch/deepseek.h"
#include "model/config_fields.h"
#include "shardload/error.h"

namespace shardload::arch::deepseek {

std::vector<ParamRule> indexer_rules() {
  const auto replicated = [](std::string name, ShapeFn shape) {
    return ParamRule{.target = "self_attn.indexer." + name,
                     .parts = {{"self_attn.indexer." + name, Split::kReplicated, shape}}};
  };
  const ShapeFn k_norm = [](const ModelConfig& m) { return Shape{m.index_head_dim}; };
  return {
      replicated("wq_b.weight",
                 [](const ModelConfig& m) {
                   return Shape{m.index_heads * m.index_head_dim, m.q_lora_rank};
                 }),
      replicated("wk.weight",
                 [](const ModelConfig& m) {
                   return Shape{m.index_head_dim, m.hidden};
                 }),
      replicated("k_norm.weight", k_norm),
      replicated("k_norm.bias", k_norm),
      replicated("weights_proj.weight",
                 [](const ModelConfig& m) {
                   return Shape{m.index_heads, m.hidden};
                 }),
  };
}

void read_indexer_config(const nlohmann::json& c, ModelConfig& m, std::string_view model) {
  // The indexer reads the MLA query's low-rank input (q_a_layernorm's output).
  if (m.q_lora_rank == 0) {
    throw Error(ErrorKind::kConfig, std::string(model) + "'s indexer needs the low-rank query",
                {.file = "config.json",
                 .field = "q_lora_rank",
                 .expected = "a positive integer",
                 .found = "0"});
  }
  // transformers' DeepseekV32Config defaults (64 heads of 128).
  m.index_heads = config::get_positive(c, "index_n_heads", 64);
  m.index_head_dim = config::get_positive(c, "index_head_dim", 128);
}

void write_indexer(const TinySizes& m, TensorWriter& w, const std::string& attention) {
  const std::string p = attention + "indexer.";
  w.projection(p + "wq_b", m.index_heads * m.index_head_dim, m.q_lora_rank);
  w.projection(p + "wk", m.index_head_dim, m.hidden);
  w.norm(p + "k_norm", m.index_head_dim);
  w.bias(p + "k_norm.bias", {m.index_head_dim});
  w.weight(p + "weights_proj.weight", {m.index_heads, m.hidden});
}

void tiny_indexer_defaults(TinySizes& m) {
  m.index_heads = 4;
  m.index_head_dim = 32;
}

// The indexer is replicated: its 128-row blocks are never split.
void tiny_indexer_block_fp8(TinySizes& m) {
  m.index_heads = 2;
  m.index_head_dim = kFp8BlockSize;
}

void tiny_indexer_config(const TinySizes& m, nlohmann::json& c) {
  c["index_n_heads"] = m.index_heads;
  c["index_head_dim"] = m.index_head_dim;
  c["index_topk"] = 2048;
}

const ArchTable& indexed_table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({layer_rules(/*score_bias=*/true), indexer_rules()}),
      .skips = skips_with_mtp_layers(),
  };
  return table;
}

void write_indexed_attention(const TinySizes& m, TensorWriter& w, const std::string& attention) {
  write_latent_attention(m, w, attention);
  write_indexer(m, w, attention);
}

void write_moe_with_score_bias(const TinySizes& m, TensorWriter& w, const std::string& layer) {
  write_moe(m, w, layer, /*score_bias=*/true);
}

}  // namespace shardload::arch::deepseek
