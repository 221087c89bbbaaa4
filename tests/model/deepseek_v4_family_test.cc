// DeepSeek-V4 (deepseek_v4): DeepseekV4ForCausalLM's config.json as the Hub writes it (compress_ratios
// and num_hash_layers, block FP8 with ue8m0 scales beside MXFP4 experts: expert_dtype fp4) and as
// transformers 5 writes it (layer_types, mlp_layer_types, compress_rates); the per-layer compression,
// hash routing and score bias; the mtp.* skip; the refusals naming the field
// (tests/shard/deepseek_v4_plan_test.cc: the plans).
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "config_refusal.h"
#include "model/arch/family.h"
#include "model/arch_table.h"
#include "model/quant/mxfp4.h"
#include "shardload/error.h"
#include "shardload/model.h"
#include "shardload/weight_format.h"

namespace shardload {
// Named: the unity build puts this file beside the other tests of its folder.
namespace deepseek_v4_test {
namespace {

using json = nlohmann::json;

// DeepSeek-V4-Flash's config.json (tests/data/configs/deepseek-v4-flash) at 6 layers: two sliding
// layers, then ratio 4 and 128 alternating, the MTP layer's entry last.
json flash_config() {
  return {{"architectures", {"DeepseekV4ForCausalLM"}},
          {"model_type", "deepseek_v4"},
          {"hidden_size", 4096},
          {"num_hidden_layers", 6},
          {"num_attention_heads", 64},
          {"num_key_value_heads", 1},
          {"head_dim", 512},
          {"q_lora_rank", 1024},
          {"qk_rope_head_dim", 64},
          {"o_groups", 8},
          {"o_lora_rank", 1024},
          {"hc_mult", 4},
          {"index_n_heads", 64},
          {"index_head_dim", 128},
          {"n_routed_experts", 256},
          {"n_shared_experts", 1},
          {"num_experts_per_tok", 6},
          {"moe_intermediate_size", 2048},
          {"num_hash_layers", 3},
          {"topk_method", "noaux_tc"},
          {"compress_ratios", {0, 0, 4, 128, 4, 128, 0}},
          {"vocab_size", 129280},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"},
          {"expert_dtype", "fp4"},
          {"quantization_config",
           {{"activation_scheme", "dynamic"},
            {"fmt", "e4m3"},
            {"quant_method", "fp8"},
            {"scale_fmt", "ue8m0"},
            {"weight_block_size", {128, 128}}}}};
}

TEST(DeepseekV4Family, ReadsTheHubsConfig) {
  const ModelConfig m = ModelConfig::from_json(flash_config());
  EXPECT_EQ(family_name(m.family), "deepseek_v4");
  EXPECT_TRUE(m.weight_prefix.empty());
  EXPECT_EQ(m.head_dim, 512u);
  EXPECT_EQ(m.q_lora_rank, 1024u);
  EXPECT_EQ(m.o_groups, 8u);
  EXPECT_EQ(m.o_lora_rank, 1024u);
  EXPECT_EQ(m.hc_mult, 4u);
  EXPECT_EQ(m.index_heads, 64u);
  EXPECT_EQ(m.index_head_dim, 128u);
  EXPECT_EQ(m.experts, 256u);
  EXPECT_EQ(m.shared_intermediate, 2048u);
  EXPECT_EQ(m.hash_topk, 6u);
  EXPECT_EQ(m.moe_layer, std::vector<bool>(6, true));
  EXPECT_EQ(m.hash_layers, 3);
  EXPECT_TRUE(m.score_bias);
  EXPECT_EQ(m.compress_ratio, (std::vector<uint64_t>{0, 0, 4, 128, 4, 128}));
  // Block FP8 under DeepSeek's scale names, ue8m0 bytes beside the MXFP4 experts.
  EXPECT_EQ(m.quantization, Quantization::kFp8Block);
  EXPECT_EQ(m.expert_format, &mxfp4_format());
  EXPECT_EQ(m.block_scale_suffix, "scale");
  EXPECT_EQ(m.block_scale_dtype, DType::kF8E8M0);
  const WeightFormat f = weight_format(m, false);
  ASSERT_EQ(f.companions.size(), 1u);
  EXPECT_EQ(f.companions[0].checkpoint_suffix, "scale");
  EXPECT_EQ(f.companions[0].rank_suffix, "weight_scale_inv");
  EXPECT_EQ(f.companions[0].stored_dtype, DType::kF8E8M0);
  EXPECT_EQ(f.companions[0].dtype, CompanionDtype::kStored);
  EXPECT_NE(f.scheme.find("F8_E8M0"), std::string::npos) << f.scheme;
}

TEST(DeepseekV4Family, ReadsTransformersSpelling) {
  json c = flash_config();
  c.erase("compress_ratios");
  c.erase("num_hash_layers");
  c["layer_types"] = {"sliding_attention", "heavily_compressed_attention", "compressed_sparse_attention",
                      "heavily_compressed_attention", "compressed_sparse_attention", "sliding_attention"};
  c["mlp_layer_types"] = {"hash_moe", "hash_moe", "moe", "moe", "moe", "moe"};
  c["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 128}};
  const ModelConfig m = ModelConfig::from_json(c);
  EXPECT_EQ(m.hash_layers, 2);
  EXPECT_EQ(m.compress_ratio, (std::vector<uint64_t>{0, 128, 4, 128, 4, 0}));
  // Neither: transformers' defaults (3 hash layers; two heavily compressed, then alternating).
  c.erase("layer_types");
  c.erase("mlp_layer_types");
  const ModelConfig d = ModelConfig::from_json(c);
  EXPECT_EQ(d.hash_layers, 3);
  EXPECT_EQ(d.compress_ratio, (std::vector<uint64_t>{128, 128, 128, 4, 128, 4}));
}

TEST(DeepseekV4Family, ExpertDtypeDecidesTheScalesAndTheExperts) {
  json c = flash_config();
  c["expert_dtype"] = "fp8";  // Flash-Base: block-FP8 experts, float32 scales
  const ModelConfig base = ModelConfig::from_json(c);
  EXPECT_EQ(base.expert_format, nullptr);
  EXPECT_EQ(base.block_scale_dtype, std::nullopt);
  EXPECT_EQ(weight_format(base, false).companions.at(0).checkpoint_suffix, "scale");
  c = flash_config();
  c.erase("quantization_config");  // bf16 (make-tiny, transformers)
  const ModelConfig bf16 = ModelConfig::from_json(c);
  EXPECT_EQ(bf16.expert_format, nullptr);
  EXPECT_EQ(bf16.quantization, Quantization::kNone);
  c = flash_config();
  c.erase("topk_method");  // vLLM creates the score bias only with noaux_tc
  EXPECT_FALSE(ModelConfig::from_json(c).score_bias);
}

TEST(DeepseekV4Family, SkipsTheMtpModuleOnly) {
  const ModelConfig m = ModelConfig::from_json(flash_config());
  const arch::ArchTable& table = arch::table_for(m.family);
  const auto skipped = [&](const std::string& name) {
    return std::any_of(table.skips.begin(), table.skips.end(),
                       [&](const arch::SkipRule& s) { return s.matches(name, m); });
  };
  EXPECT_TRUE(skipped("mtp.0.e_proj.weight"));
  EXPECT_TRUE(skipped("mtp.0.ffn.experts.3.w1.weight"));
  EXPECT_FALSE(skipped("layers.5.attn.wq_a.weight"));
  EXPECT_FALSE(skipped("head.weight"));
  EXPECT_EQ(m.family->checkpoint_layers, "layers.");
  // DeepSeek-V4's attention projections are FP8 linears; the compressors' are not.
  EXPECT_TRUE(arch::is_linear_weight("model.layers.0.attn.fused_wqa_wkv.weight"));
  EXPECT_TRUE(arch::is_linear_weight("model.layers.0.attn.wo_a.weight"));
  EXPECT_TRUE(arch::is_linear_weight("model.layers.0.attn.indexer.wq_b.weight"));
  EXPECT_FALSE(arch::is_linear_weight("model.layers.0.attn.compressor.fused_wkv_wgate.weight"));
  EXPECT_FALSE(arch::is_linear_weight("model.layers.0.attn.indexer.weights_proj.weight"));
}

TEST(DeepseekV4Family, RefusesWhatItCannotHoldNamingTheField) {
  json c = flash_config();
  c["o_groups"] = 6;
  testing::expect_config_refused_naming(c, "o_groups");
  c = flash_config();
  c["expert_dtype"] = "fp2";
  testing::expect_config_refused_naming(c, "expert_dtype");
  c = flash_config();
  c["compress_ratios"] = {0, 0, 8, 128, 4, 128, 0};
  testing::expect_config_refused_naming(c, "compress_ratios");
  c = flash_config();
  c["compress_ratios"] = {0, 0};
  testing::expect_config_refused_naming(c, "compress_ratios");
  c = flash_config();
  c.erase("q_lora_rank");
  testing::expect_config_refused_naming(c, "q_lora_rank");
  c = flash_config();
  c.erase("o_lora_rank");
  testing::expect_config_refused_naming(c, "o_lora_rank");
  c = flash_config();
  c["compress_rates"] = {{"compressed_sparse_attention", 8}};
  testing::expect_config_refused_naming(c, "compress_rates");
}

}  // namespace
}  // namespace deepseek_v4_test
}  // namespace shardload
