// GLM-4.7-Flash (glm4_moe_lite) and GLM-5 (glm_moe_dsa) read as DeepSeek-V3 and V3.2 under GLM's
// config fields: the dense layers from transformers' mlp_layer_types or vLLM's first_k_dense_replace
// (both must agree), transformers' defaults without either, GLM-5's indexer, and the refusals naming
// the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/arch/family.h"
#include "config_refusal.h"
#include "shardload/error.h"
#include "shardload/model.h"

namespace shardload {
namespace {

using json = nlohmann::json;

json lite_config() {
  return {{"architectures", {"Glm4MoeLiteForCausalLM"}},
          {"hidden_size", 64},
          {"vocab_size", 128},
          {"num_hidden_layers", 4},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 4},
          {"intermediate_size", 96},
          {"q_lora_rank", 32},
          {"kv_lora_rank", 32},
          {"qk_nope_head_dim", 16},
          {"qk_rope_head_dim", 8},
          {"v_head_dim", 16},
          {"n_routed_experts", 8},
          {"n_shared_experts", 1},
          {"moe_intermediate_size", 32}};
}

json dsa_config() {
  json c = lite_config();
  c["architectures"] = {"GlmMoeDsaForCausalLM"};
  c["index_n_heads"] = 2;
  c["index_head_dim"] = 16;
  c["index_topk"] = 2048;
  return c;
}

void expect_glm_refused_naming(const json& config, const std::string& field) {
  testing::expect_config_refused_naming(config, field);
}

TEST(GlmMlaFamilies, DenseLayersFromEitherFieldOrTransformersDefaults) {
  // Neither field: transformers' defaults (GLM-4.7-Flash one dense layer, GLM-5 three).
  ModelConfig m = ModelConfig::from_json(lite_config());
  EXPECT_EQ(family_name(m.family), "glm4_moe_lite");
  EXPECT_TRUE(m.is_mla());
  EXPECT_EQ(m.moe_layer, (std::vector<bool>{false, true, true, true}));
  m = ModelConfig::from_json(dsa_config());
  EXPECT_EQ(family_name(m.family), "glm_moe_dsa");
  EXPECT_EQ(m.moe_layer, (std::vector<bool>{false, false, false, true}));

  // vLLM's field alone, transformers' alone, and both agreeing.
  json c = lite_config();
  c["first_k_dense_replace"] = 2;
  EXPECT_EQ(ModelConfig::from_json(c).moe_layer, (std::vector<bool>{false, false, true, true}));
  c.erase("first_k_dense_replace");
  c["mlp_layer_types"] = {"dense", "sparse", "dense", "sparse"};
  EXPECT_EQ(ModelConfig::from_json(c).moe_layer, (std::vector<bool>{false, true, false, true}));
  c["mlp_layer_types"] = {"dense", "dense", "sparse", "sparse"};
  c["first_k_dense_replace"] = 2;
  EXPECT_EQ(ModelConfig::from_json(c).moe_layer, (std::vector<bool>{false, false, true, true}));

  // Two models in one config (vLLM would build another than transformers), or malformed kinds.
  c["first_k_dense_replace"] = 1;
  expect_glm_refused_naming(c, "mlp_layer_types");
  c.erase("first_k_dense_replace");
  c["mlp_layer_types"] = {"dense", "sparse"};
  expect_glm_refused_naming(c, "mlp_layer_types");
  c["mlp_layer_types"] = {"dense", "sparse", "moe", "sparse"};
  expect_glm_refused_naming(c, "mlp_layer_types");
}

TEST(GlmMlaFamilies, Glm5ReadsItsIndexerAndRefusesLayersSharingOne) {
  json c = dsa_config();
  const ModelConfig m = ModelConfig::from_json(c);
  EXPECT_EQ(m.index_heads, 2u);
  EXPECT_EQ(m.index_head_dim, 16u);
  c["indexer_types"] = {"full", "full", "full", "full"};
  EXPECT_NO_THROW(ModelConfig::from_json(c));
  c["indexer_types"] = {"full", "shared", "full", "shared"};
  expect_glm_refused_naming(c, "indexer_types");
  c.erase("indexer_types");
  c["index_topk_freq"] = 2;
  expect_glm_refused_naming(c, "index_topk_freq");
  c.erase("index_topk_freq");
  c["q_lora_rank"] = nullptr;
  expect_glm_refused_naming(c, "q_lora_rank");
}

// GLM-5's FP8 checkpoints list modules that are neither projections shardload reads as FP8 nor
// tensors it reads at all ("self_attn.indexers_proj", the multi-token-prediction layer's projections):
// planned; a projection of a layer it reads is still refused.
TEST(GlmMlaFamilies, Glm5Fp8ModulesToNotConvert) {
  json c = dsa_config();
  c["quantization_config"] = {{"quant_method", "fp8"},
                              {"fmt", "e4m3"},
                              {"activation_scheme", "dynamic"},
                              {"weight_block_size", {128, 128}},
                              {"modules_to_not_convert",
                               {"lm_head", "model.embed_tokens", "mlp.gate", "self_attn.indexers_proj",
                                "model.layers.4.eh_proj", "model.layers.4.self_attn.o_proj"}}};
  EXPECT_EQ(ModelConfig::from_json(c).quantization, Quantization::kFp8Block);
  for (const char* projection : {"model.layers.3.self_attn.o_proj", "self_attn.kv_b_proj", "indexer.wk"}) {
    json bad = c;
    bad["quantization_config"]["modules_to_not_convert"].push_back(projection);
    expect_glm_refused_naming(bad, "quantization_config.modules_to_not_convert");
  }
}

}  // namespace
}  // namespace shardload
