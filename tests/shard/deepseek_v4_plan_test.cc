// DeepSeek-V4's plans (deepseek_v4): make-tiny's checkpoints in DeepSeek's own names (layers.N.attn.wq_a,
// ffn.experts.E.w1, embed, head, hc_head_*), bf16 and as the Hub ships them (block FP8 with ue8m0
// X.scale grids, MXFP4 routed experts with F8_E8M0 scales), planned at tp 2 x ep 2 into vLLM 0.33's
// own parameter names: the fused wq_a/wkv and compressor wkv/wgate, heads split for wq_b, wo_a, wo_b and
// attn_sink, the compressors and indexer whole, tid2eid in the hash-routed layer and the score bias in
// the others, the E8M0 bytes never cast.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "shardload/checkpoint.h"
#include "shardload/error.h"
#include "shardload/plan.h"
#include "shardload/tiny.h"
#include "shard/config_plan.h"
#include "temp_dir.h"

namespace shardload {
// Named: the unity build puts this file beside the other tests of its folder.
namespace deepseek_v4_test {
namespace {

using json = nlohmann::json;

json v4_json(const std::string& path) { return json::parse(testing::read_file(path)); }

Plan v4_plan(const std::string& dir, int tp, int ep) {
  ParallelConfig p;
  p.tp = tp;
  p.ep = ep;
  return make_plan(Checkpoint::open(dir), p);
}

std::map<std::string, const PlanParam*> v4_params(const Plan& plan, int rank) {
  std::map<std::string, const PlanParam*> params;
  for (const PlanParam& p : plan.ranks[static_cast<size_t>(rank)].params) params[p.name] = &p;
  return params;
}

TEST(DeepseekV4Plan, Bf16IntoVllmsNamesAtTp2Ep2) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("v4");
  make_tiny({.arch = "deepseek_v4", .out = dir, .seed = 5});
  const json c = v4_json(dir + "/config.json");
  ASSERT_EQ(c.at("architectures")[0], "DeepseekV4ForCausalLM");
  EXPECT_FALSE(c.contains("quantization_config"));
  const uint64_t h = c.at("hidden_size"), heads = c.at("num_attention_heads"), d = c.at("head_dim"),
                 q = c.at("q_lora_rank"), g = c.at("o_groups"), r = c.at("o_lora_rank"),
                 e = c.at("n_routed_experts"), im = c.at("moe_intermediate_size"), v = c.at("vocab_size"),
                 hc = c.at("hc_mult"), ih = c.at("index_n_heads"), id = c.at("index_head_dim");
  EXPECT_EQ(c.at("compress_ratios"), json({128, 4}));
  const json index = v4_json(dir + "/model.safetensors.index.json");
  const json& files = index.at("weight_map");
  for (const char* name : {"embed.weight", "head.weight", "norm.weight", "hc_head_fn", "layers.0.attn.wq_a.weight",
                           "layers.0.ffn.gate.tid2eid", "layers.1.ffn.gate.bias", "layers.1.attn.indexer.wq_b.weight",
                           "layers.0.attn.compressor.ape", "layers.1.ffn.experts.7.w2.weight"}) {
    EXPECT_TRUE(files.contains(name)) << name;
  }

  const Plan plan = v4_plan(dir, 2, 2);
  EXPECT_TRUE(plan.skipped.empty());
  const auto params = v4_params(plan, 1);
  const auto expect = [&](const std::string& name, DType dtype, const Shape& shape) {
    ASSERT_TRUE(params.count(name)) << name;
    EXPECT_EQ(params.at(name)->dtype, dtype) << name;
    EXPECT_EQ(params.at(name)->shape, shape) << name;
  };
  const std::string l0 = "model.layers.0.", l1 = "model.layers.1.";
  expect("model.embed_tokens.weight", DType::kBF16, {(v + 63) / 64 * 64 / 2, h});
  expect("lm_head.weight", DType::kBF16, {(v + 63) / 64 * 64 / 2, h});
  expect("model.norm.weight", DType::kBF16, {h});
  expect("model.hc_head_fn", DType::kF32, {hc, hc * h});
  expect("model.hc_head_base", DType::kF32, {hc});
  expect("model.hc_head_scale", DType::kF32, {1});
  // Attention: wq_a and wkv fused and replicated; the heads split.
  expect(l0 + "attn.fused_wqa_wkv.weight", DType::kBF16, {q + d, h});
  expect(l0 + "attn.wq_b.weight", DType::kBF16, {heads * d / 2, q});
  expect(l0 + "attn.wo_a.weight", DType::kBF16, {g * r / 2, heads * d / g});
  expect(l0 + "attn.wo_b.weight", DType::kBF16, {h, g * r / 2});
  expect(l0 + "attn.attn_sink", DType::kF32, {heads / 2});
  expect(l0 + "attn.q_norm.weight", DType::kBF16, {q});
  expect(l0 + "attn.kv_norm.weight", DType::kBF16, {d});
  expect(l0 + "hc_attn_fn", DType::kF32, {(2 + hc) * hc, hc * h});
  expect(l0 + "hc_ffn_scale", DType::kF32, {3});
  // Layer 0: hash-routed, ratio 128 (no indexer); layer 1: ratio 4 (overlapping windows, the indexer).
  EXPECT_FALSE(params.count(l0 + "ffn.gate.e_score_correction_bias"));
  expect(l0 + "ffn.gate.tid2eid", DType::kI32, {v, c.at("num_experts_per_tok")});
  expect(l1 + "attn.compressor.ape", DType::kF32, {4, 2 * d});
  expect(l1 + "attn.compressor.fused_wkv_wgate.weight", DType::kBF16, {4 * d, h});
  expect(l1 + "attn.compressor.norm.weight", DType::kBF16, {d});
  expect(l1 + "attn.indexer.wq_b.weight", DType::kBF16, {ih * id, q});
  expect(l1 + "attn.indexer.weights_proj.weight", DType::kBF16, {ih, h});
  expect(l1 + "attn.indexer.compressor.ape", DType::kF32, {4, 2 * id});
  expect(l1 + "attn.indexer.compressor.fused_wkv_wgate.weight", DType::kBF16, {4 * id, h});
  expect(l0 + "attn.compressor.ape", DType::kF32, {128, d});
  expect(l0 + "attn.compressor.fused_wkv_wgate.weight", DType::kBF16, {2 * d, h});
  EXPECT_FALSE(params.count(l0 + "attn.indexer.wq_b.weight"));
  expect(l1 + "ffn.gate.e_score_correction_bias", DType::kF32, {e});
  EXPECT_FALSE(params.count(l1 + "ffn.gate.tid2eid"));
  // MoE: half the experts a rank (ep 2), the shared experts (two of moe_intermediate) split over tp.
  const uint64_t shared = im * c.at("n_shared_experts").get<uint64_t>();
  expect(l1 + "ffn.gate.weight", DType::kBF16, {e, h});
  expect(l1 + "ffn.experts.w13_weight", DType::kBF16, {e / 2, 2 * im, h});
  expect(l1 + "ffn.experts.w2_weight", DType::kBF16, {e / 2, h, im});
  expect(l1 + "ffn.shared_experts.gate_up_proj.weight", DType::kBF16, {shared, h});
  expect(l1 + "ffn.shared_experts.down_proj.weight", DType::kBF16, {h, shared / 2});
}

TEST(DeepseekV4Plan, HubFormatFp8BlockWithUe8m0ScalesAndMxfp4Experts) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("v4");
  make_tiny({.arch = "deepseek_v4", .out = dir, .seed = 5, .quant = "mxfp4"});
  const json c = v4_json(dir + "/config.json");
  EXPECT_EQ(c.at("expert_dtype"), "fp4");
  EXPECT_EQ(c.at("quantization_config").at("scale_fmt"), "ue8m0");
  const uint64_t h = c.at("hidden_size"), heads = c.at("num_attention_heads"), d = c.at("head_dim"),
                 q = c.at("q_lora_rank"), e = c.at("n_routed_experts"), im = c.at("moe_intermediate_size");
  const Checkpoint ckpt = Checkpoint::open(dir);
  EXPECT_EQ(ckpt.find("layers.1.attn.wq_b.weight")->info->dtype, DType::kF8E4M3);
  EXPECT_EQ(ckpt.find("layers.1.attn.wq_b.scale")->info->dtype, DType::kF8E8M0);
  EXPECT_EQ(ckpt.find("layers.1.ffn.experts.3.w1.weight")->info->dtype, DType::kI8);
  EXPECT_EQ(ckpt.find("layers.1.ffn.experts.3.w1.scale")->info->dtype, DType::kF8E8M0);
  EXPECT_EQ(ckpt.find("layers.1.attn.compressor.wkv.weight")->info->dtype, DType::kBF16);

  // tp 2: the shared experts' 256 rows are two FP8 blocks; with ep 1 the MXFP4 experts are cut by MoE-TP 2.
  for (const std::pair<int, int>& layout : {std::pair{2, 2}, std::pair{2, 1}}) {
    const int tp = layout.first, ep = layout.second;  // named: clang's lambdas capture no structured binding
    const Plan plan = v4_plan(dir, tp, ep);
    EXPECT_EQ(plan.quantization, Quantization::kFp8Block);
    const uint64_t moe_tp = static_cast<uint64_t>(tp / ep), local = e / static_cast<uint64_t>(ep);
    const auto params = v4_params(plan, tp - 1);
    const auto expect = [&](const std::string& name, DType dtype, const Shape& shape) {
      ASSERT_TRUE(params.count(name)) << name << " tp " << tp;
      EXPECT_EQ(params.at(name)->dtype, dtype) << name;
      EXPECT_EQ(params.at(name)->shape, shape) << name << " tp " << tp;
    };
    const std::string l1 = "model.layers.1.";
    const uint64_t t = static_cast<uint64_t>(tp);
    // FP8 linears with their ue8m0 grids as vLLM holds them (float8_e8m0fnu), cut on whole blocks.
    expect(l1 + "attn.fused_wqa_wkv.weight", DType::kF8E4M3, {q + d, h});
    expect(l1 + "attn.fused_wqa_wkv.weight_scale_inv", DType::kF8E8M0, {(q + d) / 128, h / 128});
    expect(l1 + "attn.wq_b.weight", DType::kF8E4M3, {heads * d / t, q});
    expect(l1 + "attn.wq_b.weight_scale_inv", DType::kF8E8M0, {heads * d / t / 128, q / 128});
    expect(l1 + "attn.indexer.wq_b.weight_scale_inv", DType::kF8E8M0,
           {c.at("index_n_heads").get<uint64_t>() * c.at("index_head_dim").get<uint64_t>() / 128, q / 128});
    const uint64_t shared = im * c.at("n_shared_experts").get<uint64_t>();
    expect(l1 + "ffn.shared_experts.gate_up_proj.weight_scale_inv", DType::kF8E8M0, {2 * shared / t / 128, h / 128});
    // The compressors, the indexer's weights_proj and the router stay bf16.
    expect(l1 + "attn.compressor.fused_wkv_wgate.weight", DType::kBF16, {4 * d, h});
    EXPECT_FALSE(params.count(l1 + "attn.compressor.fused_wkv_wgate.weight_scale_inv"));
    expect(l1 + "ffn.gate.weight", DType::kBF16, {e, h});
    // MXFP4 experts: codes and E8M0 scales kept as stored, each rank's experts and MoE-TP share.
    expect(l1 + "ffn.experts.w13_weight", DType::kU8, {local, 2 * im / moe_tp, h / 2});
    expect(l1 + "ffn.experts.w13_weight_scale", DType::kU8, {local, 2 * im / moe_tp, h / 32});
    expect(l1 + "ffn.experts.w2_weight", DType::kU8, {local, h, im / moe_tp / 2});
    expect(l1 + "ffn.experts.w2_weight_scale", DType::kU8, {local, h, im / moe_tp / 32});
    EXPECT_FALSE(params.count(l1 + "ffn.experts.w13_weight_scale_inv"));
  }
}

TEST(DeepseekV4Plan, RefusesAnMxfp4CutInsideAGroupNamingTheTensor) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("v4");
  make_tiny({.arch = "deepseek_v4", .out = dir, .seed = 5, .quant = "mxfp4"});
  json c = v4_json(dir + "/config.json");
  // Whole FP8 blocks for the attention at tp 8 (o_lora_rank 128) and no shared expert: only the experts'
  // MoE-TP 8 cut is left, 16 of each expert's 128 rows, inside w2's 32-value groups (8 bytes of 16).
  c["o_lora_rank"] = 128;
  c["n_shared_experts"] = 0;
  ParallelConfig p;
  p.tp = 8;
  p.ep = 1;
  try {
    plan_from_config(c, p, [](std::string_view) { return false; });
    ADD_FAILURE() << "a cut inside an MXFP4 group accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("MXFP4 32-value groups"), std::string::npos) << what;
    EXPECT_NE(what.find("ffn.experts.w2_weight"), std::string::npos) << what;
  }
  p.tp = 4;  // MoE-TP 4: 32 rows, one group of each expert's w2 a rank
  EXPECT_EQ(plan_from_config(c, p, [](std::string_view) { return false; }).ranks.size(), 4u);
}

}  // namespace
}  // namespace deepseek_v4_test
}  // namespace shardload
