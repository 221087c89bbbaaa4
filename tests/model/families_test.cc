// Reading config.json through the families' descriptors: each class name maps to one family, whose
// reader fills its own fields; GLM-4.5's attention_bias means q/k/v biases and its first
// first_k_dense_replace layers are dense.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/arch/family.h"
#include "model/quant/mxfp4.h"
#include "shardload/error.h"
#include "shardload/model.h"

namespace shardload {
namespace {

// A config every family reader must refuse with Error(kConfig) naming `field`.
void expect_refused_naming(const nlohmann::json& config, const std::string& field) {
  try {
    ModelConfig::from_json(config);
    ADD_FAILURE() << field << " accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(e.field(), field);
  }
}

nlohmann::json glm4_moe_config() {
  return {{"architectures", {"Glm4MoeForCausalLM"}},
          {"hidden_size", 64},
          {"vocab_size", 128},
          {"num_hidden_layers", 4},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 32},
          {"intermediate_size", 96},
          {"attention_bias", true},
          {"use_qk_norm", true},
          {"n_routed_experts", 16},
          {"n_shared_experts", 1},
          {"moe_intermediate_size", 32},
          {"first_k_dense_replace", 2},
          {"n_group", 4},
          {"topk_group", 2}};
}

TEST(ModelFamilies, Glm4MoeConfig) {
  const ModelConfig m = ModelConfig::from_json(glm4_moe_config());
  EXPECT_EQ(family_name(m.family), "glm4_moe");
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_FALSE(m.attention_bias) << "o_proj has no bias";
  EXPECT_FALSE(m.is_mla());
  EXPECT_EQ(m.head_dim, 32u);
  EXPECT_EQ(m.experts, 16u);
  EXPECT_EQ(m.moe_intermediate, 32u);
  EXPECT_EQ(m.shared_intermediate, 32u);
  EXPECT_EQ(m.n_group, 4u);
  EXPECT_EQ(m.moe_layer, (std::vector<bool>{false, false, true, true}));
}

nlohmann::json deepseek_v32_config() {
  return {{"architectures", {"DeepseekV32ForCausalLM"}},
          {"hidden_size", 64},  {"vocab_size", 128},       {"num_hidden_layers", 2},
          {"num_attention_heads", 4},                      {"intermediate_size", 96},
          {"q_lora_rank", 32},  {"kv_lora_rank", 32},      {"qk_nope_head_dim", 16},
          {"qk_rope_head_dim", 8},                         {"v_head_dim", 16},
          {"n_routed_experts", 4},                         {"moe_intermediate_size", 32},
          {"first_k_dense_replace", 1}};
}

TEST(ModelFamilies, DeepseekV32ReadsItsIndexerWithTransformersDefaults) {
  nlohmann::json config = deepseek_v32_config();
  ModelConfig m = ModelConfig::from_json(config);
  EXPECT_EQ(family_name(m.family), "deepseek_v32");
  EXPECT_EQ(m.index_heads, 64u);
  EXPECT_EQ(m.index_head_dim, 128u);
  config["index_n_heads"] = 8;
  config["index_head_dim"] = 16;
  m = ModelConfig::from_json(config);
  EXPECT_EQ(m.index_heads, 8u);
  EXPECT_EQ(m.index_head_dim, 16u);
  config["q_lora_rank"] = nullptr;  // the indexer projects the low-rank query: V2-Lite's layout has none
  try {
    ModelConfig::from_json(config);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(e.field(), "q_lora_rank");
  }
  config["q_lora_rank"] = 32;
  config["index_head_dim"] = 0;
  EXPECT_THROW(ModelConfig::from_json(config), Error);
}

TEST(ModelFamilies, MiniMaxM2RefusesTheLayoutsOfOtherMiniMaxModels) {
  const nlohmann::json base = {{"architectures", {"MiniMaxM2ForCausalLM"}},
                               {"hidden_size", 64}, {"vocab_size", 128}, {"num_hidden_layers", 2},
                               {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 32},
                               {"intermediate_size", 96}, {"num_local_experts", 4}};
  const ModelConfig m = ModelConfig::from_json(base);
  EXPECT_EQ(family_name(m.family), "minimax_m2");
  EXPECT_EQ(m.moe_intermediate, 96u) << "every expert is intermediate_size wide";
  EXPECT_EQ(m.moe_layer, (std::vector<bool>{true, true}));
  for (const auto& [field, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"attn_type_list", {1, 0}},            // MiniMax-M1 / Text-01 lightning attention
           {"qk_norm_type", "per_head"},
           {"use_qk_norm", false},
           {"shared_intermediate_size", 128}}) {
    nlohmann::json config = base;
    config[field] = value;
    expect_refused_naming(config, field);
  }
}

nlohmann::json llama4_text_config() {
  return {{"architectures", {"Llama4ForCausalLM"}}, {"model_type", "llama4_text"},
          {"hidden_size", 64}, {"vocab_size", 128}, {"num_hidden_layers", 4},
          {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 16},
          {"intermediate_size", 32}, {"intermediate_size_mlp", 96}, {"num_local_experts", 4},
          {"interleave_moe_layer_step", 2}};
}

TEST(ModelFamilies, Llama4ReadsItsMlpWidthsAndMoeLayers) {
  nlohmann::json config = llama4_text_config();
  ModelConfig m = ModelConfig::from_json(config);
  EXPECT_EQ(family_name(m.family), "llama4");
  EXPECT_EQ(m.moe_intermediate, 32u) << "intermediate_size is the experts' width";
  EXPECT_EQ(m.shared_intermediate, 32u) << "one shared expert as wide";
  EXPECT_EQ(m.intermediate, 96u) << "the dense layers' intermediate_size_mlp";
  EXPECT_EQ(m.moe_layer, (std::vector<bool>{false, true, false, true}));
  EXPECT_TRUE(m.weight_prefix.empty());
  config["moe_layers"] = {0, 3};  // transformers' explicit list wins over the step
  EXPECT_EQ(ModelConfig::from_json(config).moe_layer, (std::vector<bool>{true, false, false, true}));
  for (const auto& [field, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"attention_bias", true}, {"intermediate_size_mlp", nullptr}}) {
    nlohmann::json bad = llama4_text_config();
    if (value.is_null()) {
      bad.erase(field);
    } else {
      bad[field] = value;
    }
    expect_refused_naming(bad, field);
  }
}

TEST(ModelFamilies, Llama4MultimodalConfigReadsItsTextModel) {
  // Llama4ForConditionalGeneration nests the text model under text_config; the outer config holds the
  // architecture and dtype. The text model's tensors are named under language_model.
  nlohmann::json text = llama4_text_config();
  text.erase("architectures");
  const nlohmann::json outer = {{"architectures", {"Llama4ForConditionalGeneration"}}, {"model_type", "llama4"},
                                {"torch_dtype", "float16"}, {"text_config", text},
                                {"vision_config", {{"hidden_size", 32}}}};
  const ModelConfig m = ModelConfig::from_json(outer);
  EXPECT_EQ(family_name(m.family), "llama4");
  EXPECT_EQ(m.weight_prefix, "language_model.");
  EXPECT_EQ(m.hidden, 64u);
  EXPECT_EQ(m.experts, 4u);
  EXPECT_EQ(m.dtype, DType::kF16);
  nlohmann::json no_text = outer;
  no_text.erase("text_config");
  try {
    ModelConfig::from_json(no_text);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "text_config");
  }
}

TEST(ModelFamilies, Qwen35MoeMultimodalConfigReadsItsTextModelWithEveryLayerMoe) {
  // Qwen3_5MoeForConditionalGeneration nests the text model under text_config (model_type qwen3_5_moe_text);
  // the outer config holds the architecture and tie_word_embeddings. The text model's tensors stand under
  // model.language_model. in place of model.; every layer is MoE (no decoder_sparse_step is read).
  const nlohmann::json text = {{"model_type", "qwen3_5_moe_text"}, {"hidden_size", 64}, {"vocab_size", 128},
                               {"num_hidden_layers", 4}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                               {"head_dim", 32}, {"num_experts", 8}, {"moe_intermediate_size", 32},
                               {"shared_expert_intermediate_size", 32}, {"decoder_sparse_step", 2},
                               {"layer_types", {"linear_attention", "linear_attention", "linear_attention",
                                                "full_attention"}},
                               {"linear_num_key_heads", 4}, {"linear_num_value_heads", 8}, {"dtype", "bfloat16"}};
  const nlohmann::json outer = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
                                {"model_type", "qwen3_5_moe"}, {"tie_word_embeddings", true},
                                {"text_config", text}, {"vision_config", {{"depth", 1}}}};
  const ModelConfig m = ModelConfig::from_json(outer);
  EXPECT_EQ(family_name(m.family), "qwen3_5_moe");
  EXPECT_EQ(m.weight_prefix, "model.language_model.");
  EXPECT_TRUE(m.tie_embeddings);
  EXPECT_EQ(m.experts, 8u);
  EXPECT_EQ(m.moe_layer, (std::vector<bool>{true, true, true, true}));
  EXPECT_EQ(m.linear_layer, (std::vector<bool>{true, true, true, false}));
  nlohmann::json text_only = text;
  text_only["architectures"] = {"Qwen3_5MoeForCausalLM"};
  EXPECT_TRUE(ModelConfig::from_json(text_only).weight_prefix.empty());
}

TEST(ModelFamilies, GptOssReadsMxfp4AsItsExpertsFormat) {
  nlohmann::json config = {{"architectures", {"GptOssForCausalLM"}}, {"hidden_size", 64}, {"vocab_size", 128},
                           {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                           {"head_dim", 16}, {"intermediate_size", 64}, {"num_local_experts", 4}};
  ModelConfig m = ModelConfig::from_json(config);
  EXPECT_EQ(family_name(m.family), "gpt_oss");
  EXPECT_TRUE(m.attention_bias) << "q/k/v/o biases unless the config says otherwise";
  EXPECT_EQ(m.moe_intermediate, 64u);
  EXPECT_EQ(m.moe_layer, (std::vector<bool>{true, true}));
  EXPECT_EQ(m.expert_format, nullptr);
  config["quantization_config"] = {{"quant_method", "mxfp4"}, {"modules_to_not_convert", {"lm_head"}}};
  m = ModelConfig::from_json(config);
  EXPECT_EQ(m.expert_format, &mxfp4_format());
  EXPECT_EQ(m.quantization, Quantization::kNone) << "nothing is FP8";
}

TEST(ModelFamilies, Qwen3NextLayerTypesFromTheListOrTheInterval) {
  nlohmann::json config = {{"architectures", {"Qwen3NextForCausalLM"}},
                           {"hidden_size", 64}, {"vocab_size", 128}, {"num_hidden_layers", 4},
                           {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 32},
                           {"intermediate_size", 96}, {"num_experts", 4}, {"moe_intermediate_size", 32},
                           {"shared_expert_intermediate_size", 32}, {"full_attention_interval", 2},
                           {"linear_num_key_heads", 4}, {"linear_num_value_heads", 8}};
  ModelConfig m = ModelConfig::from_json(config);
  EXPECT_EQ(family_name(m.family), "qwen3_next");
  EXPECT_EQ(m.linear_layer, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(m.moe_layer, (std::vector<bool>{true, true, true, true}));
  EXPECT_EQ(m.linear_key_head_dim, 128u) << "transformers' default";
  EXPECT_EQ(m.linear_conv_kernel, 4u);
  config.erase("full_attention_interval");  // the default, 4
  EXPECT_EQ(ModelConfig::from_json(config).linear_layer, (std::vector<bool>{true, true, true, false}));
  config["layer_types"] = {"full_attention", "linear_attention", "linear_attention", "full_attention"};
  EXPECT_EQ(ModelConfig::from_json(config).linear_layer, (std::vector<bool>{false, true, true, false}));
  for (const auto& [field, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"layer_types", {"linear_attention", "sliding_attention", "linear_attention", "full_attention"}},
           {"layer_types", {"linear_attention"}},
           {"linear_num_value_heads", 6}}) {  // not whole groups per key head
    nlohmann::json bad = config;
    bad[field] = value;
    expect_refused_naming(bad, field);
  }
}

TEST(ModelFamilies, Glm4MoeExpertCountIsBounded) {
  nlohmann::json config = glm4_moe_config();
  config["n_routed_experts"] = uint64_t{1} << 40;
  try {
    ModelConfig::from_json(config);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(e.field(), "n_routed_experts");
    EXPECT_EQ(e.message(), "size out of range");
  }
}

TEST(ModelFamilies, EveryClassNameHasOneFamilyAndEveryNameIsKnown) {
  std::set<std::string_view> names;
  std::set<std::string_view> classes;
  for (const arch::Family* family : arch::families()) {
    EXPECT_TRUE(names.insert(family->name).second) << family->name;
    EXPECT_EQ(arch::find_family(family->name), family);
    ASSERT_FALSE(family->architectures.empty()) << family->name;
    for (std::string_view cls : family->architectures) {
      EXPECT_TRUE(classes.insert(cls).second) << cls;
      EXPECT_EQ(arch::family_for_architecture(cls), family) << cls;
    }
  }
  EXPECT_TRUE(names.contains("glm4_moe"));
  EXPECT_EQ(arch::family_for_architecture("Glm4ForCausalLM"), nullptr);
}

TEST(ModelFamilies, ExpertCountSpellingsOncePerFamilyOrder) {
  EXPECT_EQ(expert_count_fields(),
            (std::vector<std::string_view>{"num_experts", "num_local_experts", "n_routed_experts",
                                           "moe_num_experts"}));
}

}  // namespace
}  // namespace shardload
