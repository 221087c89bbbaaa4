// GLM-5 (GlmMoeDsaForCausalLM, glm_moe_dsa): DeepSeek-V3.2 under GLM's names, that is DeepSeek-V3's
// latent attention, router and experts plus V3.2's sparse-attention indexer in every layer
// (deepseek_indexer.cc), with GLM's config fields (glm_mla.cc). Multi-token-prediction layers are
// skipped, as vLLM's model does.
#include "model/arch/deepseek.h"
#include "model/arch/glm_mla.h"
#include "model/config_fields.h"

namespace shardload::arch {
namespace {

// Later GLM-5 configs may share one layer's top-k among the next ones (IndexCache): such a "shared"
// layer has no indexer in transformers' model nor in vLLM's (which drops the checkpoint's copy),
// while every layer here has one. Refused until the table can say which layers have it.
void refuse_shared_indexers(const nlohmann::json& c) {
  if (const nlohmann::json* types = config::field(c, "indexer_types");
      types != nullptr && types->is_array()) {
    for (const nlohmann::json& type : *types) {
      if (type != "full") {
        throw config::config_error("layers without their own indexer are not supported",
                                   "indexer_types", "\"full\" on every layer", type.dump());
      }
    }
  }
  if (config::get_uint(c, "index_topk_freq", 1) > 1) {
    throw config::config_error("layers without their own indexer are not supported",
                               "index_topk_freq", "1",
                               std::to_string(config::get_uint(c, "index_topk_freq", 1)));
  }
  if (const nlohmann::json* pattern = config::field(c, "index_topk_pattern"); pattern != nullptr) {
    throw config::config_error("layers without their own indexer are not supported",
                               "index_topk_pattern", "absent (every layer's own indexer)",
                               pattern->dump());
  }
}

void read_config(const nlohmann::json& c, ModelConfig& m) {
  // transformers' GlmMoeDsaConfig: first_k_dense_replace 3.
  glm_mla::read_config(c, m, 3);
  deepseek::read_indexer_config(c, m, "GLM-5");
  refuse_shared_indexers(c);
}

constexpr TinyLayerWriter kLayer{.attention = deepseek::write_indexed_attention,
                                .moe = deepseek::write_moe_with_score_bias,
                                .moe_layer = glm_mla::moe_layer};

}  // namespace

const Family& glm_moe_dsa_family() {
  static const Family family{
      .name = "glm_moe_dsa",
      .architectures = {"GlmMoeDsaForCausalLM"},
      .expert_count_field = "n_routed_experts",
      .read_config = read_config,
      .table = deepseek::indexed_table,
      .tiny_defaults =
          [](TinySizes& m) {
            glm_mla::tiny_defaults(m);
            deepseek::tiny_indexer_defaults(m);
          },
      .tiny_block_fp8 =
          [](TinySizes& m) {
            deepseek::tiny_block_fp8(m);
            deepseek::tiny_indexer_block_fp8(m);
          },
      .tiny_moe_layer = glm_mla::moe_layer,
      .tiny_config =
          [](const TinySizes& m, nlohmann::json& c) {
            glm_mla::tiny_config(m, c);
            deepseek::tiny_indexer_config(m, c);
            c["scoring_func"] = "sigmoid";
          },
      .tiny_tensors = write_model_with_mtp<kLayer>,
  };
  return family;
}

}  // namespace shardload::arch
