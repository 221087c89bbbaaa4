// DeepSeek-V3.2 (DeepseekV32ForCausalLM): DeepSeek-V3 plus the sparse-attention indexer in every
// layer (self_attn.indexer.): wq_b [index_n_heads * index_head_dim, q_lora_rank] and wk
// [index_head_dim, H] (FP8 on the Hub), the LayerNorm k_norm (weight and bias) and weights_proj
// [index_n_heads, H] (BF16). vLLM and SGLang replicate all of them on every rank: the indexer scores
// tokens per rank, it is not split with the attention heads. Its names stay the checkpoint's, as SGLang
// and vLLM before its wk + weights_proj fusion keep them (docs/families/deepseek_v32.md).
#include "model/arch/deepseek.h"
#include "model/config_fields.h"
#include "shardload/error.h"

namespace shardload::arch {
namespace {

std::vector<ParamRule> indexer_rules() {
  const auto replicated = [](std::string name, ShapeFn shape) {
    return ParamRule{.target = "self_attn.indexer." + name,
                     .parts = {{"self_attn.indexer." + name, Split::kReplicated, shape}}};
  };
  const ShapeFn k_norm = [](const ModelConfig& m) { return Shape{m.index_head_dim}; };
  return {
      replicated("wq_b.weight",
                 [](const ModelConfig& m) { return Shape{m.index_heads * m.index_head_dim, m.q_lora_rank}; }),
      replicated("wk.weight", [](const ModelConfig& m) { return Shape{m.index_head_dim, m.hidden}; }),
      replicated("k_norm.weight", k_norm),
      replicated("k_norm.bias", k_norm),
      replicated("weights_proj.weight", [](const ModelConfig& m) { return Shape{m.index_heads, m.hidden}; }),
  };
}

const ArchTable& table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({deepseek::layer_rules(/*score_bias=*/true), indexer_rules()}),
      .skips = skips_with_mtp_layers(),
  };
  return table;
}

void read_config(const nlohmann::json& c, ModelConfig& m) {
  deepseek::read_config(c, m);
  // The indexer reads the MLA query's low-rank input (q_a_layernorm's output).
  if (m.q_lora_rank == 0) {
    throw Error(ErrorKind::kConfig, "DeepSeek-V3.2's indexer needs the low-rank query",
                {.file = "config.json", .field = "q_lora_rank", .expected = "a positive integer", .found = "0"});
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

constexpr TinyLayerWriter kLayer{
    .attention =
        [](const TinySizes& m, TensorWriter& w, const std::string& p) {
          write_latent_attention(m, w, p);
          write_indexer(m, w, p);
        },
    .moe = [](const TinySizes& m, TensorWriter& w, const std::string& l) { deepseek::write_moe(m, w, l, true); },
    .moe_layer = deepseek::moe_layer};

}  // namespace

const Family& deepseek_v32_family() {
  static const Family family{
      .name = "deepseek_v32",
      .architectures = {"DeepseekV32ForCausalLM"},
      .expert_count_field = "n_routed_experts",
      .read_config = read_config,
      .table = table,
      .tiny_defaults =
          [](TinySizes& m) {
            deepseek::tiny_defaults(m, /*v3=*/true);
            m.index_heads = 4;
            m.index_head_dim = 32;
          },
      // The indexer is replicated: its 128-row blocks are never split.
      .tiny_block_fp8 =
          [](TinySizes& m) {
            deepseek::tiny_block_fp8(m);
            m.index_heads = 2;
            m.index_head_dim = kFp8BlockSize;
          },
      .tiny_moe_layer = deepseek::moe_layer,
      .tiny_config =
          [](const TinySizes& m, nlohmann::json& c) {
            deepseek::tiny_config(m, c, /*v3=*/true);
            c["index_n_heads"] = m.index_heads;
            c["index_head_dim"] = m.index_head_dim;
            c["index_topk"] = 2048;
          },
      .tiny_tensors =
          [](const TinySizes& m, TensorWriter& w) {
            write_decoder_model(m, w, kLayer);
            write_mtp_layers(m, w, kLayer);
          },
  };
  return family;
}

}  // namespace shardload::arch
