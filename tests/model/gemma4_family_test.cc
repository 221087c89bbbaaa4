// Gemma 4 (gemma4): config.json as the Hub writes it (global_head_dim, num_global_key_value_heads)
// and as transformers 5 saves it (per_layer_config), transformers' defaults, and the plans: sliding
// and full-attention layers with their own head sizes and KV heads, K reused as V, the layers that
// read an earlier layer's KV cache; the refusals naming the field (tests/shard/gemma4_plan_test.cc:
// the plans).
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/arch/family.h"
#include "model/arch_table.h"
#include "config_refusal.h"
#include "gemma4_configs.h"
#include "shardload/error.h"
#include "shardload/model.h"

namespace shardload {
// Named: the unity build puts this file beside the other tests of its folder.
namespace gemma4_test {
namespace {

using json = nlohmann::json;

json text_config() { return testing::gemma4_text_config(); }
json moe_config() { return testing::gemma4_moe_config(); }
void expect_refused_naming(const json& config, const std::string& field) {
  testing::expect_config_refused_naming(config, field);
}

TEST(Gemma4Family, ReadsTheLayersGeometryAsTheHubAndTransformersWriteIt) {
  const ModelConfig m = ModelConfig::from_json(text_config());
  EXPECT_EQ(family_name(m.family), "gemma4");
  EXPECT_EQ(m.global_layer, (std::vector<bool>{false, false, true, false, false, true}));
  EXPECT_EQ(m.global_head_dim, 32u);
  EXPECT_EQ(m.global_kv_heads, 1u);
  EXPECT_TRUE(m.k_eq_v);
  EXPECT_TRUE(m.tie_embeddings);  // Gemma's default
  EXPECT_EQ(m.first_kv_shared_layer, 6);
  EXPECT_FALSE(m.is_moe());

  // transformers 5's save: per_layer_config overrides, no global_* fields.
  json saved = text_config();
  saved.erase("global_head_dim");
  saved.erase("num_global_key_value_heads");
  saved["per_layer_config"] = {{"2", {{"head_dim", 32}, {"num_key_value_heads", 1}}},
                               {"5", {{"head_dim", 32}, {"num_key_value_heads", 1}}}};
  const ModelConfig s = ModelConfig::from_json(saved);
  EXPECT_EQ(s.global_layer, m.global_layer);
  EXPECT_EQ(s.global_head_dim, 32u);
  EXPECT_EQ(s.global_kv_heads, 1u);

  // transformers' defaults: five sliding layers then a full one, the last forced full, a full
  // layer's head_dim 512, its KV heads num_key_value_heads without attention_k_eq_v, per-layer
  // inputs of 256.
  json d = text_config();
  for (const char* key : {"layer_types", "global_head_dim", "num_global_key_value_heads",
                          "attention_k_eq_v", "hidden_size_per_layer_input"}) {
    d.erase(key);
  }
  d["num_hidden_layers"] = 8;
  const ModelConfig t = ModelConfig::from_json(d);
  EXPECT_EQ(t.global_layer,
            (std::vector<bool>{false, false, false, false, false, true, false, true}));
  EXPECT_EQ(t.global_head_dim, 512u);
  EXPECT_EQ(t.global_kv_heads, 2u);
  EXPECT_FALSE(t.k_eq_v);
  EXPECT_EQ(t.per_layer_hidden, 256u);
  EXPECT_EQ(t.per_layer_vocab, 262144u);

  const ModelConfig moe = ModelConfig::from_json(moe_config());
  EXPECT_EQ(moe.experts, 8u);
  EXPECT_EQ(moe.moe_intermediate, 32u);
  EXPECT_EQ(moe.moe_layer_count(), 6);
}

TEST(Gemma4Family, MultimodalConfigReadsItsTextModelUnderItsPrefix) {
  json text = moe_config();
  text.erase("architectures");
  const json outer = {{"architectures", {"Gemma4ForConditionalGeneration"}},
                      {"model_type", "gemma4"},
                      {"text_config", text},
                      {"vision_config", {{"hidden_size", 32}}}};
  const ModelConfig m = ModelConfig::from_json(outer);
  EXPECT_EQ(family_name(m.family), "gemma4");
  EXPECT_EQ(m.weight_prefix, "model.language_model.");
  EXPECT_TRUE(m.tie_embeddings);
  const arch::Family& f = *m.family;
  EXPECT_EQ(arch::checkpoint_name(f, m.weight_prefix, "model.layers.0.router.scale"),
            "model.language_model.layers.0.router.scale");
  EXPECT_EQ(arch::text_model_name(f, m.weight_prefix,
                                  "model.vision_tower.encoder.layers.0.input_layernorm.weight"),
            std::nullopt);
  EXPECT_EQ(
      arch::text_model_name(f, m.weight_prefix, "model.embed_audio.embedding_projection.weight"),
      std::nullopt);
}

TEST(Gemma4Family, SkipsTheSharedLayersKeysAndValuesOnly) {
  json c = text_config();
  c["num_kv_shared_layers"] = 2;
  const ModelConfig m = ModelConfig::from_json(c);
  const arch::ArchTable& table = arch::table_for(m.family);
  const auto skipped = [&](const std::string& name) {
    return std::any_of(table.skips.begin(), table.skips.end(),
                       [&](const arch::SkipRule& s) { return s.matches(name, m); });
  };
  EXPECT_TRUE(skipped("model.layers.4.self_attn.k_proj.weight"));
  EXPECT_TRUE(skipped("model.layers.5.self_attn.v_proj.weight"));
  EXPECT_TRUE(skipped("model.layers.5.self_attn.k_norm.weight"));
  EXPECT_FALSE(skipped("model.layers.3.self_attn.k_proj.weight"));
  EXPECT_FALSE(skipped("model.layers.5.self_attn.q_proj.weight"));
  EXPECT_FALSE(
      skipped("model.layers.2.self_attn.v_proj.weight"));  // a k_eq_v layer has none to skip
}

TEST(Gemma4Family, RefusesWhatItCannotHoldNamingTheField) {
  json c = moe_config();
  c["enable_moe_block"] =
      false;  // vLLM would build the MoE block (num_experts set), transformers not
  expect_refused_naming(c, "enable_moe_block");
  c = text_config();
  c["enable_moe_block"] = true;
  expect_refused_naming(c, "enable_moe_block");
  c = text_config();
  c["per_layer_config"] = {{"0", {{"head_dim", 32}}}};  // a sliding layer of its own size
  expect_refused_naming(c, "per_layer_config");
  c["per_layer_config"] = {{"9", {{"head_dim", 32}}}};
  expect_refused_naming(c, "per_layer_config.9");
  c = text_config();
  c["num_kv_shared_layers"] = 6;
  expect_refused_naming(c, "num_kv_shared_layers");
  c = text_config();
  c["attention_bias"] = true;
  expect_refused_naming(c, "attention_bias");
  c = text_config();
  c["layer_types"] = {"sliding_attention"};
  expect_refused_naming(c, "layer_types");
}

}  // namespace
}  // namespace gemma4_test
}  // namespace shardload
