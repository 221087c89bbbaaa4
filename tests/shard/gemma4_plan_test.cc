// Gemma 4's plans (gemma4): sliding and full-attention layers with their own head sizes and KV
// heads, K reused as V, the layers that read an earlier layer's KV cache (q_proj alone, a
// double-wide MLP), the dense MLP beside the MoE block, the router's scales, the fused experts and
// the per-layer embeddings.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "shard/config_plan.h"
#include "gemma4_configs.h"
#include "shardload/error.h"
#include "shardload/plan.h"

namespace shardload {
// Named: the unity build puts this file beside the other tests of its folder.
namespace gemma4_test {
namespace {

using json = nlohmann::json;

json moe_config() { return testing::gemma4_moe_config(); }

const PlanParam* find(const RankPlan& rank, const std::string& name) {
  const auto it = std::find_if(rank.params.begin(), rank.params.end(),
                               [&](const PlanParam& p) { return p.name == name; });
  return it == rank.params.end() ? nullptr : &*it;
}

Plan plan(const json& config, int tp, int ep) {
  ParallelConfig p;
  p.tp = tp;
  p.ep = ep;
  return plan_from_config(config, p, [](std::string_view) { return false; });
}

TEST(Gemma4Plan, PlansEachKindOfLayerWithItsOwnShapes) {
  json c = moe_config();
  c["num_kv_shared_layers"] = 2;  // layers 4 (sliding) and 5 (full) read earlier layers' caches
  c["use_double_wide_mlp"] = true;
  c["hidden_size_per_layer_input"] = 4;
  c["vocab_size_per_layer_input"] = 300;
  const Plan p = plan(c, 2, 2);
  const RankPlan& r = p.ranks[1];
  const auto shape = [&](const std::string& name) {
    const PlanParam* param = find(r, name);
    return param == nullptr ? Shape{} : param->shape;
  };
  // Sliding: 2 q heads and 1 of 2 KV heads a rank, of 16; full: 2 q heads of 32 and the one KV head
  // replicated, k_proj's rows as K and as V.
  EXPECT_EQ(shape("model.layers.0.self_attn.qkv_proj.weight"), (Shape{(2 + 2) * 16, 64}));
  EXPECT_EQ(shape("model.layers.0.self_attn.o_proj.weight"), (Shape{64, 32}));
  EXPECT_EQ(shape("model.layers.0.self_attn.k_norm.weight"), (Shape{16}));
  EXPECT_EQ(shape("model.layers.2.self_attn.qkv_proj.weight"), (Shape{(2 + 2) * 32, 64}));
  EXPECT_EQ(shape("model.layers.2.self_attn.o_proj.weight"), (Shape{64, 64}));
  EXPECT_EQ(shape("model.layers.2.self_attn.q_norm.weight"), (Shape{32}));
  const PlanParam* qkv = find(r, "model.layers.2.self_attn.qkv_proj.weight");
  ASSERT_NE(qkv, nullptr);
  ASSERT_EQ(qkv->pieces.size(), 3u);
  EXPECT_EQ(p.sources[qkv->pieces[1].source].name, "model.layers.2.self_attn.k_proj.weight");
  EXPECT_EQ(p.sources[qkv->pieces[2].source].name, "model.layers.2.self_attn.k_proj.weight");
  // The shared-cache layers: q_proj alone (no qkv, no k_norm), the dense MLP twice as wide.
  for (const int layer : {4, 5}) {
    const std::string l = "model.layers." + std::to_string(layer) + ".";
    EXPECT_EQ(find(r, l + "self_attn.qkv_proj.weight"), nullptr) << layer;
    EXPECT_EQ(find(r, l + "self_attn.k_norm.weight"), nullptr) << layer;
    EXPECT_EQ(shape(l + "mlp.gate_up_proj.weight"), (Shape{2 * 96, 64})) << layer;
    EXPECT_EQ(shape(l + "mlp.down_proj.weight"), (Shape{64, 96})) << layer;
  }
  EXPECT_EQ(shape("model.layers.4.self_attn.q_proj.weight"), (Shape{2 * 16, 64}));
  EXPECT_EQ(shape("model.layers.5.self_attn.q_proj.weight"), (Shape{2 * 32, 64}));
  EXPECT_EQ(shape("model.layers.3.mlp.gate_up_proj.weight"), (Shape{96, 64}));
  // Every layer: its dense MLP beside the MoE block, the router replicated, 4 of 8 experts fused.
  EXPECT_EQ(shape("model.layers.0.router.proj.weight"), (Shape{8, 64}));
  EXPECT_EQ(shape("model.layers.0.router.scale"), (Shape{64}));
  EXPECT_EQ(shape("model.layers.0.router.per_expert_scale"), (Shape{8}));
  EXPECT_EQ(shape("model.layers.0.experts.w13_weight"), (Shape{4, 2 * 32, 64}));
  EXPECT_EQ(shape("model.layers.0.experts.w2_weight"), (Shape{4, 64, 32}));
  EXPECT_EQ(shape("model.layers.0.post_feedforward_layernorm_2.weight"), (Shape{64}));
  EXPECT_EQ(shape("model.layers.0.layer_scalar"), (Shape{1}));
  // Per-layer embeddings: the table vocab-parallel (300 rows padded to 320), its projection by
  // rows.
  EXPECT_EQ(shape("model.embed_tokens_per_layer.weight"), (Shape{160, 6 * 4}));
  EXPECT_EQ(shape("model.per_layer_model_projection.weight"), (Shape{12, 64}));
  EXPECT_EQ(shape("model.layers.1.per_layer_input_gate.weight"), (Shape{4, 64}));
  EXPECT_EQ(find(r, "lm_head.weight"), nullptr);                          // tied
  EXPECT_EQ(find(r, "model.layers.0.self_attn.v_norm.weight"), nullptr);  // weightless

  // The full layers' one KV head over 4 ranks: replicated; their heads must divide as the sliding
  // ones.
  EXPECT_EQ(plan(moe_config(), 4, 1).ranks[3].params.empty(), false);
  json three = moe_config();
  three["num_global_key_value_heads"] = 3;
  EXPECT_THROW(plan(three, 2, 1), Error);
}

}  // namespace
}  // namespace gemma4_test
}  // namespace shardload
