// Kimi-K2.5's plans (kimi_k25): make-tiny's checkpoint as the Hub's is made (the DeepSeek-V3 text
// model under language_model., the routed experts pack-quantized int4 in 32-value groups with an
// int32 weight_shape, the rest bf16), planned at tp 2 x ep 2 into vLLM's own names; the vision
// tower and projector skipped and named.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "safetensors_bytes.h"
#include "shardload/checkpoint.h"
#include "shardload/plan.h"
#include "shardload/tiny.h"
#include "temp_dir.h"

namespace shardload {
// Named: the unity build puts this file beside the other tests of its folder.
namespace kimi_k25_test {
namespace {

using json = nlohmann::json;

json read_json(const std::string& path) { return json::parse(testing::read_file(path)); }

Plan kimi_plan(const std::string& dir, int tp, int ep) {
  ParallelConfig p;
  p.tp = tp;
  p.ep = ep;
  return make_plan(Checkpoint::open(dir), p);
}

TEST(KimiK25Plan, RoutedExpertsInt4TheRestBf16UnderVllmsNames) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("kimi");
  make_tiny({.arch = "kimi_k25", .out = dir, .seed = 3, .quant = "ct-w4a16"});
  const json config = read_json(dir + "/config.json");
  ASSERT_EQ(config.at("architectures")[0], "KimiK25ForConditionalGeneration");
  const json& t = config.at("text_config");
  const uint64_t h = t.at("hidden_size"), e = t.at("n_routed_experts"),
                 im = t.at("moe_intermediate_size");
  EXPECT_EQ(config.at("quantization_config").at("ignore"),
            json({"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                  "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"}));

  // The checkpoint: experts packed with an int32 weight_shape (Kimi's files), attention and shared
  // experts bf16.
  const json index = read_json(dir + "/model.safetensors.index.json");
  const json& files = index.at("weight_map");
  const std::string l1 = "language_model.model.layers.1.";
  EXPECT_TRUE(files.contains(l1 + "mlp.experts.0.gate_proj.weight_packed"));
  EXPECT_TRUE(files.contains(l1 + "mlp.experts.0.gate_proj.weight_shape"));
  EXPECT_TRUE(files.contains(l1 + "self_attn.q_a_proj.weight"));
  EXPECT_TRUE(files.contains(l1 + "mlp.shared_experts.down_proj.weight"));
  EXPECT_TRUE(files.contains("language_model.lm_head.weight"));
  EXPECT_FALSE(files.contains(l1 + "self_attn.q_a_proj.weight_packed"));
  const Checkpoint ckpt = Checkpoint::open(dir);
  EXPECT_EQ(ckpt.find(l1 + "mlp.experts.0.gate_proj.weight_shape")->info->dtype, DType::kI32);

  const Plan plan = kimi_plan(dir, 2, 2);
  EXPECT_EQ(plan.quantization, Quantization::kWna16);
  EXPECT_TRUE(plan.skipped.empty());
  std::map<std::string, const PlanParam*> params;
  for (const PlanParam& p : plan.ranks[1].params) params[p.name] = &p;
  const auto expect = [&](const std::string& name, DType dtype, const Shape& shape) {
    ASSERT_TRUE(params.count(name)) << name;
    EXPECT_EQ(params[name]->dtype, dtype) << name;
    EXPECT_EQ(params[name]->shape, shape) << name;
  };
  // Half the experts a rank, whole (ep 2: no MoE-TP), N-first as vLLM's WNA16 MoE method holds
  // them; the int32 [N, K] of each expert's last-read part in the model dtype.
  expect(l1 + "mlp.experts.w13_weight_packed", DType::kI32, {e / 2, 2 * im, h / 8});
  expect(l1 + "mlp.experts.w13_weight_scale", DType::kBF16, {e / 2, 2 * im, h / 32});
  expect(l1 + "mlp.experts.w13_weight_shape", DType::kBF16, {e / 2, 2});
  expect(l1 + "mlp.experts.w2_weight_packed", DType::kI32, {e / 2, h, im / 8});
  expect(l1 + "mlp.experts.w2_weight_shape", DType::kBF16, {e / 2, 2});
  // Everything else bf16, split as DeepSeek-V3's.
  for (const std::string& name :
       {l1 + "self_attn.fused_qkv_a_proj.weight", l1 + "self_attn.q_b_proj.weight",
        l1 + "self_attn.kv_b_proj.weight", l1 + "self_attn.o_proj.weight",
        l1 + "mlp.shared_experts.gate_up_proj.weight", l1 + "mlp.shared_experts.down_proj.weight",
        std::string("language_model.model.layers.0.mlp.gate_up_proj.weight"),
        std::string("language_model.lm_head.weight"),
        std::string("language_model.model.embed_tokens.weight")}) {
    ASSERT_TRUE(params.count(name)) << name;
    EXPECT_EQ(params[name]->dtype, DType::kBF16) << name;
    EXPECT_FALSE(params.count(name.substr(0, name.size() - 6) + "weight_packed")) << name;
  }
  expect(l1 + "mlp.gate.e_score_correction_bias", DType::kF32, {e});
}

TEST(KimiK25Plan, TheVisionTowerAndProjectorAreSkippedAndNamed) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("kimi");
  make_tiny({.arch = "kimi_k25", .out = dir, .seed = 3, .quant = "ct-w4a16"});
  // The tower's and projector's tensors in a file of their own, as the Hub's last shards hold them.
  const std::string header =
      R"({"mm_projector.proj.0.weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},)"
      R"("vision_tower.encoder.blocks.0.wqkv.weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]},)"
      R"("vision_tower.patch_embed.proj.weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[16,24]}})";
  std::ofstream(dir + "/model-tower.safetensors", std::ios::binary)
      << testing::safetensors_file(header, 24);
  json index = read_json(dir + "/model.safetensors.index.json");
  for (const char* name :
       {"mm_projector.proj.0.weight", "vision_tower.encoder.blocks.0.wqkv.weight",
        "vision_tower.patch_embed.proj.weight"}) {
    index["weight_map"][name] = "model-tower.safetensors";
  }
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump(2);

  const Checkpoint ckpt = Checkpoint::open(dir);
  ASSERT_EQ(ckpt.warnings().size(), 1u);
  EXPECT_NE(ckpt.warnings()[0].find(
                "3 tensors of mm_projector.*, vision_tower.* (the vision tower and projector) are "
                "skipped; shardload loads the text model (language_model.*)"),
            std::string::npos)
      << ckpt.warnings()[0];
  ParallelConfig p;
  p.tp = 2;
  p.ep = 2;
  const Plan plan = make_plan(ckpt, p);
  std::vector<std::string> skipped = plan.skipped;
  std::sort(skipped.begin(), skipped.end());
  EXPECT_EQ(skipped, (std::vector<std::string>{"mm_projector.proj.0.weight",
                                               "vision_tower.encoder.blocks.0.wqkv.weight",
                                               "vision_tower.patch_embed.proj.weight"}));
}

}  // namespace
}  // namespace kimi_k25_test
}  // namespace shardload
