// The generator's parts without the disk: size scaling, layout legality, shard planning, value
// streams.

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shardload/error.h"
#include "tiny/tiny_config.h"
#include "tiny/tiny_model.h"
#include "tiny/tiny_shards.h"
#include "tiny/tiny_values.h"

namespace shardload::tiny {
namespace {

const arch::Family& family_named(std::string_view name) {
  const arch::Family* family = arch::find_family(name);
  if (family == nullptr) throw std::runtime_error("no family " + std::string(name));
  return *family;
}

// Every tp in {1,2,4,8} and ep in {1,2,4} must be a legal layout (layout.md's divisibility rules).
void expect_shardable(const TinyModel& m, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(m.heads % 8, 0u);
  EXPECT_TRUE(m.kv_heads % 8 == 0 || 8 % m.kv_heads == 0) << m.kv_heads;
  EXPECT_EQ(m.intermediate % 8, 0u);
  EXPECT_EQ(m.moe_intermediate % 8, 0u);
  EXPECT_EQ(m.shared_intermediate % 8, 0u);
  EXPECT_EQ((m.shared_experts * m.moe_intermediate) % 8, 0u);
  EXPECT_EQ(m.experts % 4, 0u);
  EXPECT_EQ(m.head_dim % 2, 0u);
  EXPECT_EQ(m.qk_rope_head_dim % 2, 0u);
  if (m.hidden >= 1024) {
    EXPECT_EQ(m.intermediate % 128, 0u);
    EXPECT_EQ(m.moe_intermediate % 128, 0u);
    EXPECT_EQ(m.hidden % 128, 0u);
  }
}

TEST(TinyModel, DefaultsAreSmallShardableAndSplitIntoThreeShards) {
  for (const arch::Family* family : arch::families()) {
    const TinyModel m = default_model(*family);
    const std::string name(family->name);
    expect_shardable(m, name);
    EXPECT_NE(m.vocab % 64, 0u) << name;
    EXPECT_GE(m.layers, 2) << name;
    EXPECT_LE(total_bytes(m), 8u << 20) << name;
    std::vector<uint64_t> sizes;
    for (const TensorSpec& spec : model_tensors(m))
      sizes.push_back(shape_nbytes(spec.shape, spec.dtype));
    EXPECT_GE(plan_shards(sizes).size(), 3u) << name;
  }
}

TEST(TinyModel, ScalesToTargetsWithinFifteenPercent) {
  for (const arch::Family* family : arch::families()) {
    for (uint64_t target :
         {4'000'000ull, 30'000'000ull, 300'000'000ull, 2'000'000'000ull, 30'000'000'000ull}) {
      TinyModel m = default_model(*family);
      scale_to_size(m, target);
      const double bytes = static_cast<double>(total_bytes(m));
      const std::string what = std::string(family->name) + " " + std::to_string(target);
      EXPECT_NEAR(bytes, static_cast<double>(target), 0.15 * static_cast<double>(target)) << what;
      expect_shardable(m, what);
      EXPECT_LE(m.head_dim, 128u) << what;
    }
  }
}

TEST(TinyModel, ScalingKeepsCountsAndManyExpertsStillScale) {
  TinyModel m = default_model(family_named("qwen3_moe"));
  apply_counts(m, 50, 128);
  scale_to_size(m, 2'000'000'000);
  EXPECT_EQ(m.layers, 50);
  EXPECT_EQ(m.experts, 128u);
  EXPECT_NEAR(static_cast<double>(total_bytes(m)), 2e9, 0.15 * 2e9);
  EXPECT_GT(model_tensors(m).size(), 19'000u);
}

TEST(TinyModel, CountsOverrideDefaults) {
  TinyModel m = default_model(family_named("deepseek_v3"));
  apply_counts(m, 5, 6);
  EXPECT_EQ(m.layers, 5);
  EXPECT_EQ(m.experts, 6u);
  EXPECT_EQ(6 % m.n_group, 0u);
  apply_counts(m, 5, 3);
  EXPECT_EQ(m.n_group, 1u) << "groups must divide the experts";
  EXPECT_LE(m.experts_per_token, m.experts);
  TinyModel q = default_model(family_named("qwen3_moe"));
  apply_counts(q, 1, -1);
  EXPECT_EQ(q.layers, 1);
  EXPECT_TRUE(q.mlp_only_layers == std::vector<int>{0});
  for (int bad : {0, -3, 100000}) {
    TinyModel x = default_model(family_named("llama"));
    EXPECT_THROW(apply_counts(x, bad, -1), Error) << bad;
    TinyModel y = default_model(family_named("mixtral"));
    EXPECT_THROW(apply_counts(y, -1, bad), Error) << bad;
  }
}

TEST(TinyModel, MoeLayerRules) {
  const TinyModel ds = default_model(family_named("deepseek_v3"));
  EXPECT_FALSE(is_moe_layer(ds, 0));
  EXPECT_TRUE(is_moe_layer(ds, 1));
  EXPECT_TRUE(is_moe_layer(ds, ds.layers)) << "the MTP layer is MoE, as in DeepSeek-V3";
  const TinyModel ernie = default_model(family_named("ernie4_5_moe"));
  EXPECT_FALSE(is_moe_layer(ernie, 0));
  EXPECT_TRUE(is_moe_layer(ernie, ernie.layers - 1));
  EXPECT_FALSE(is_moe_layer(default_model(family_named("qwen3")), 1));
  EXPECT_TRUE(is_moe_layer(default_model(family_named("qwen2_moe")), 0));
}

TEST(TinyModel, ConfigNamesTheArchitecture) {
  for (const arch::Family* family : arch::families()) {
    const nlohmann::json c = config_json(default_model(*family));
    EXPECT_EQ(c.at("architectures")[0], std::string(family->architectures.front()));
    // Llama4ForCausalLM's own model_type is transformers' llama4_text (llama4 is the multimodal class's),
    // and so are Qwen3.5's and Gemma 4's text classes'.
    const std::string name(family->name);
    const bool text_type = name == "llama4" || name.starts_with("qwen3_5") || name == "gemma4";
    EXPECT_EQ(c.at("model_type"), text_type ? name + "_text" : name);
    EXPECT_EQ(arch::find_family(family->name), family);
    EXPECT_EQ(arch::family_for_architecture(family->architectures.front()), family);
  }
  EXPECT_EQ(arch::find_family("llama3"), nullptr);
}

TEST(TinyShards, CountGrowsWithSizeAndNoShardIsEmpty) {
  const std::vector<uint64_t> ten_gib(40, uint64_t{256} << 20);
  EXPECT_EQ(plan_shards(ten_gib).size(), 5u);
  const std::vector<uint64_t> tiny = {10, 10, 10, 10, 10, 10};
  EXPECT_EQ(plan_shards(tiny).size(), 3u);
  const std::vector<uint64_t> lopsided = {1000, 1, 1, 1};
  const auto shards = plan_shards(lopsided);
  size_t placed = 0;
  for (const auto& shard : shards) {
    EXPECT_FALSE(shard.empty());
    placed += shard.size();
  }
  EXPECT_EQ(placed, lopsided.size());
  EXPECT_EQ(shard_name(0, 3), "model-00001-of-00003.safetensors");
}

TEST(TinyValues, IndependentOfThreadCountAndDistinctPerTensor) {
  const TensorSpec a{
      "model.layers.0.mlp.up_proj.weight", DType::kBF16, {512, 1000}, ValueKind::kWeight};
  const TensorSpec b{
      "model.layers.1.mlp.up_proj.weight", DType::kBF16, {512, 1000}, ValueKind::kWeight};
  const size_t n = 512 * 1000 * 2;
  std::vector<std::byte> one(2 * n), four(2 * n);
  const std::vector<FillJob> jobs_one = {{&a, {one.data(), n}}, {&b, {one.data() + n, n}}};
  const std::vector<FillJob> jobs_four = {{&a, {four.data(), n}}, {&b, {four.data() + n, n}}};
  fill_values(jobs_one, 5, 1);
  fill_values(jobs_four, 5, 4);
  EXPECT_EQ(one, four);
  EXPECT_NE(std::memcmp(one.data(), one.data() + n, n), 0);
}

}  // namespace
}  // namespace shardload::tiny
