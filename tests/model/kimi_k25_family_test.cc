// Kimi-K2.5 (kimi_k25): KimiK25ForConditionalGeneration's config.json as the Hub writes it (the
// DeepSeek-V3 text model under text_config, its quantization_config there or at the top), the
// checkpoint's names (language_model.model.*, language_model.lm_head.weight beside vision_tower.*
// and mm_projector.*), which linears its `ignore` leaves in bf16 (all but the routed experts), and
// the refusals naming the field (tests/shard/kimi_k25_plan_test.cc: the plans).
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "config_refusal.h"
#include "model/arch/family.h"
#include "model/arch_table.h"
#include "shardload/error.h"
#include "shardload/model.h"

namespace shardload {
// Named: the unity build puts this file beside the other tests of its folder.
namespace kimi_k25_test {
namespace {

using json = nlohmann::json;

// The Hub's quantization_config of Kimi-K2.5 (tests/data/configs/kimi-k2.5).
json int4_experts() {
  return {{"quant_method", "compressed-tensors"},
          {"format", "pack-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"input_activations", nullptr},
              {"weights",
               {{"num_bits", 4},
                {"type", "int"},
                {"strategy", "group"},
                {"group_size", 32},
                {"symmetric", true},
                {"dynamic", false}}}}}}},
          {"ignore",
           {"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
            "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"}}};
}

// A small KimiK25ForConditionalGeneration: 3 layers (the first dense), 8 experts of 32 and one
// shared.
json kimi_config() {
  const json text = {{"model_type", "kimi_k2"},
                     {"architectures", {"DeepseekV3ForCausalLM"}},
                     {"hidden_size", 64},
                     {"intermediate_size", 128},
                     {"moe_intermediate_size", 32},
                     {"num_hidden_layers", 3},
                     {"num_attention_heads", 4},
                     {"num_key_value_heads", 4},
                     {"n_routed_experts", 8},
                     {"n_shared_experts", 1},
                     {"num_experts_per_tok", 2},
                     {"first_k_dense_replace", 1},
                     {"moe_layer_freq", 1},
                     {"n_group", 1},
                     {"topk_group", 1},
                     {"topk_method", "noaux_tc"},
                     {"q_lora_rank", 48},
                     {"kv_lora_rank", 32},
                     {"qk_nope_head_dim", 16},
                     {"qk_rope_head_dim", 8},
                     {"v_head_dim", 16},
                     {"num_nextn_predict_layers", 0},
                     {"vocab_size", 300},
                     {"tie_word_embeddings", false},
                     {"torch_dtype", "bfloat16"},
                     {"quantization_config", int4_experts()}};
  return {{"architectures", {"KimiK25ForConditionalGeneration"}},
          {"model_type", "kimi_k25"},
          {"dtype", "bfloat16"},
          {"tie_word_embeddings", false},
          {"text_config", text},
          {"vision_config", {{"vt_hidden_size", 32}, {"vt_num_hidden_layers", 1}}}};
}

TEST(KimiK25Family, ReadsTheDeepSeekV3TextModelUnderTextConfig) {
  const ModelConfig m = ModelConfig::from_json(kimi_config());
  EXPECT_EQ(family_name(m.family), "kimi_k25");
  EXPECT_EQ(m.architecture, "KimiK25ForConditionalGeneration");
  EXPECT_EQ(m.weight_prefix, "language_model.");
  EXPECT_EQ(m.hidden, 64u);
  EXPECT_EQ(m.layers, 3);
  EXPECT_EQ(m.experts, 8u);
  EXPECT_EQ(m.moe_intermediate, 32u);
  EXPECT_EQ(m.shared_intermediate, 32u);
  EXPECT_EQ(m.moe_layer, (std::vector<bool>{false, true, true}));
  EXPECT_EQ(m.q_lora_rank, 48u);
  EXPECT_EQ(m.kv_lora_rank, 32u);
  EXPECT_FALSE(m.tie_embeddings);
  EXPECT_EQ(m.quant_format, QuantFormat::kCompressedTensors);
  EXPECT_EQ(m.quantization, Quantization::kWna16);
  EXPECT_EQ(m.weight_bits, 4u);
  EXPECT_EQ(m.group_size, 32u);
  EXPECT_FALSE(m.zero_points);

  // The same quantization_config at the top (as Kimi's own config class copies it there) reads
  // alike.
  json outer = kimi_config();
  outer["quantization_config"] = outer["text_config"]["quantization_config"];
  outer["text_config"].erase("quantization_config");
  const ModelConfig top = ModelConfig::from_json(outer);
  EXPECT_EQ(top.quantization, Quantization::kWna16);
  EXPECT_EQ(top.group_size, 32u);
}

TEST(KimiK25Family, OnlyTheRoutedExpertsAreQuantized) {
  const ModelConfig m = ModelConfig::from_json(kimi_config());
  const std::string l = "language_model.model.layers.1.";
  EXPECT_TRUE(m.module_quantized(l + "mlp.experts.7.gate_proj"));
  EXPECT_TRUE(m.module_quantized(l + "mlp.experts.0.down_proj"));
  for (const char* module :
       {"self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa",
        "self_attn.kv_b_proj", "self_attn.o_proj", "mlp.shared_experts.up_proj",
        "mlp.shared_experts.down_proj"}) {
    EXPECT_FALSE(m.module_quantized(l + module)) << module;
  }
  EXPECT_FALSE(
      m.module_quantized("language_model.model.layers.0.mlp.gate_proj"));  // the dense layer
  EXPECT_FALSE(m.module_quantized("language_model.model.layers.0.mlp.down_proj"));
}

TEST(KimiK25Family, NamesTheTextModelUnderLanguageModelAndSkipsTheTower) {
  const ModelConfig m = ModelConfig::from_json(kimi_config());
  const arch::Family& f = *m.family;
  EXPECT_EQ(
      arch::checkpoint_name(f, m.weight_prefix, "model.layers.1.mlp.experts.3.up_proj.weight"),
      "language_model.model.layers.1.mlp.experts.3.up_proj.weight");
  EXPECT_EQ(arch::checkpoint_name(f, m.weight_prefix, "lm_head.weight"),
            "language_model.lm_head.weight");
  EXPECT_EQ(arch::checkpoint_name(f, m.weight_prefix, "model.embed_tokens.weight"),
            "language_model.model.embed_tokens.weight");
  EXPECT_EQ(arch::text_model_name(f, m.weight_prefix, "language_model.model.norm.weight"),
            "model.norm.weight");
  for (const char* tower :
       {"vision_tower.encoder.blocks.0.wqkv.weight", "vision_tower.patch_embed.proj.weight",
        "mm_projector.proj.0.weight", "mm_projector.pre_norm.bias"}) {
    EXPECT_EQ(arch::text_model_name(f, m.weight_prefix, tower), std::nullopt) << tower;
  }
  // The MTP layers (none on the Hub) would be skipped as DeepSeek-V3's.
  const arch::ArchTable& table = arch::table_for(m.family);
  const auto skipped = [&](const std::string& name) {
    return std::any_of(table.skips.begin(), table.skips.end(),
                       [&](const arch::SkipRule& s) { return s.matches(name, m); });
  };
  EXPECT_TRUE(skipped("model.layers.3.self_attn.o_proj.weight"));
  EXPECT_FALSE(skipped("model.layers.2.self_attn.o_proj.weight"));
}

TEST(KimiK25Family, RefusesWhatItCannotHoldNamingTheField) {
  json c = kimi_config();
  c.erase("text_config");
  testing::expect_config_refused_naming(c, "text_config");
  c = kimi_config();
  c["text_config"].erase("kv_lora_rank");
  testing::expect_config_refused_naming(c, "kv_lora_rank");
  c = kimi_config();
  c["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 3;
  try {
    ModelConfig::from_json(c);
    ADD_FAILURE() << "3-bit accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_bits"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kimi_k25_test
}  // namespace shardload
