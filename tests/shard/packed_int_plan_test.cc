// llm-compressor's packed integer weights (compressed-tensors pack-quantized, docs/layout.md
// "compressed-tensors W4A16 / W8A16") as the planner lays them out: the rank tensors vLLM 0.33's
// loaders hold (int32 words cut on whole words, scales in the model dtype cut on whole groups, the
// weight's shape whole), and the refusals before any read: a tensor-parallel share that cuts a
// group, a weight stored in another dtype.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "handmade.h"
#include "shardload/error.h"
#include "shardload/plan.h"

namespace shardload {
namespace {

using testing::HandTensor;

// Four heads of 64 over two KV heads (q 256 rows, k and v 128), hidden 256, MLP 512: W4A16 in
// 128-value groups.
nlohmann::json w4a16_llama() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", 256},
          {"intermediate_size", 512},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 64},
          {"num_hidden_layers", 1},
          {"vocab_size", 64},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"},
          {"quantization_config",
           {{"quant_method", "compressed-tensors"},
            {"format", "pack-quantized"},
            {"config_groups",
             {{"group_0",
               {{"targets", {"Linear"}},
                {"weights",
                 {{"num_bits", 4},
                  {"type", "int"},
                  {"strategy", "group"},
                  {"group_size", 128},
                  {"symmetric", true},
                  {"dynamic", false}}}}}}},
            {"ignore", {"lm_head"}}}}};
}

// Every projection as weight_packed / weight_scale / weight_shape; `weight_dtype` the packed
// words'.
std::vector<HandTensor> packed_projections(const nlohmann::json& config,
                                           DType weight_dtype = DType::kI32,
                                           DType shape_dtype = DType::kI64) {
  std::vector<HandTensor> out;
  for (HandTensor t : testing::handmade_tensors(config)) {
    if (t.name.find("_proj.weight") == std::string::npos) {
      out.push_back(t);
      continue;
    }
    const std::string base = t.name.substr(0, t.name.size() - 6);  // "X."
    out.push_back({base + "weight_packed",
                   {t.shape[0], t.shape[1] / 8},
                   HandTensor::Kind::kWeight,
                   weight_dtype});
    out.push_back({base + "weight_scale",
                   {t.shape[0], t.shape[1] / 128},
                   HandTensor::Kind::kNorm,
                   DType::kBF16});
    out.push_back({base + "weight_shape", {2}, HandTensor::Kind::kWeight, shape_dtype});
  }
  return out;
}

Plan packed_plan_at(const std::string& dir, int tp) {
  ParallelConfig parallel;
  parallel.tp = tp;
  return make_plan(Checkpoint::open(dir), parallel);
}

TEST(PackedIntPlan, RankTensorsAreTheEngineLoadersOwn) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = w4a16_llama();
  testing::write_handmade(dir, config, packed_projections(config), 1);
  const Plan plan = packed_plan_at(dir, 2);
  EXPECT_EQ(plan.quantization, Quantization::kWna16);
  std::map<std::string, const PlanParam*> params;
  for (const PlanParam& p : plan.ranks[1].params) params[p.name] = &p;
  struct Expected {
    std::string name;
    DType dtype;
    Shape shape;
  };
  const std::string layer = "model.layers.0.";
  const Expected expected[] = {
      {layer + "self_attn.qkv_proj.weight_packed",
       DType::kI32,
       {256, 32}},  // q 128 rows, k and v 64
      {layer + "self_attn.qkv_proj.weight_scale", DType::kBF16, {256, 2}},
      {layer + "self_attn.qkv_proj.weight_shape", DType::kI64, {2}},
      {layer + "self_attn.o_proj.weight_packed", DType::kI32, {256, 16}},  // its 128 inputs of 256
      {layer + "self_attn.o_proj.weight_scale", DType::kBF16, {256, 1}},
      {layer + "mlp.gate_up_proj.weight_packed", DType::kI32, {512, 32}},
      {layer + "mlp.down_proj.weight_packed", DType::kI32, {256, 32}},
      {layer + "mlp.down_proj.weight_scale", DType::kBF16, {256, 2}},
      {"lm_head.weight", DType::kBF16, {32, 256}},  // ignored: the model dtype, no scale
  };
  for (const Expected& e : expected) {
    ASSERT_TRUE(params.count(e.name)) << e.name;
    EXPECT_EQ(params[e.name]->dtype, e.dtype) << e.name;
    EXPECT_EQ(params[e.name]->shape, e.shape) << e.name;
  }
  EXPECT_FALSE(params.count(layer + "self_attn.qkv_proj.weight"));
  EXPECT_FALSE(params.count("lm_head.weight_scale"));
  // Rank 1's o_proj words start at word 16 of each row (its inputs 128..255), its scale at group 1.
  const PlanParam& o = *params[layer + "self_attn.o_proj.weight_packed"];
  ASSERT_EQ(o.pieces.size(), 1u);
  EXPECT_EQ(o.pieces[0].col_begin, 16u);
  const PlanParam& o_scale = *params[layer + "self_attn.o_proj.weight_scale"];
  ASSERT_EQ(o_scale.pieces.size(), 1u);
  EXPECT_EQ(o_scale.pieces[0].col_begin, 1u);
}

TEST(PackedIntPlan, AShareThatCutsAGroupIsRefusedNamingTheLayerAndSizes) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = w4a16_llama();
  testing::write_handmade(dir, config, packed_projections(config), 1);
  try {
    packed_plan_at(dir, 4);  // o_proj: 64 of its 256 inputs a rank, half a 128-value group
    FAIL() << "a share of half a group must be refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << what;
    EXPECT_NE(what.find("model.layers.0.self_attn.o_proj.weight_packed"), std::string::npos)
        << what;
    EXPECT_NE(what.find("W4A16 128-value groups"), std::string::npos) << what;
    EXPECT_NE(what.find("64 columns per rank"), std::string::npos) << what;
  }
}

TEST(PackedIntPlan, WordsStoredInAnotherDtypeAreRefusedByName) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = w4a16_llama();
  testing::write_handmade(dir, config, packed_projections(config, DType::kF32), 1);
  try {
    packed_plan_at(dir, 1);
    FAIL() << "float words must be refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupportedDtype) << what;
    EXPECT_NE(what.find(".weight_packed"), std::string::npos) << what;
    EXPECT_NE(what.find("I32"), std::string::npos) << what;
  }
}

// Kimi-K2.5's routed experts store weight_shape as int32, taken where the rank holds it in the model dtype
// (tests/shard/kimi_k25_plan_test.cc); a dense layer's rank keeps the int64 as stored, so int32 is refused.
TEST(PackedIntPlan, AnInt32WeightShapeOfADenseLayerIsRefusedByName) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = w4a16_llama();
  testing::write_handmade(dir, config, packed_projections(config, DType::kI32, DType::kI32), 1);
  try {
    packed_plan_at(dir, 1);
    FAIL() << "an int32 weight_shape of a dense layer must be refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupportedDtype) << what;
    EXPECT_NE(what.find(".weight_shape"), std::string::npos) << what;
    EXPECT_NE(what.find("I64"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace shardload
