// llm-compressor's W8A8 int8 weights (compressed-tensors int-quantized, docs/layout.md "compressed-tensors
// W8A8 int8") as the planner lays them out: int8 weights cut as bf16 ones, one float32 scale per row
// (vLLM 0.33's loaders' own), and a weight stored in another dtype refused before any read.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "handmade.h"
#include "shardload/error.h"
#include "shardload/plan.h"

namespace shardload {
namespace {

using testing::HandTensor;

// Four heads of 64 over two KV heads (q 256 rows, k and v 128), hidden 256, MLP 512.
nlohmann::json w8a8_llama() {
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
            {"format", "int-quantized"},
            {"config_groups",
             {{"group_0",
               {{"targets", {"Linear"}},
                {"weights", {{"num_bits", 8}, {"type", "int"}, {"strategy", "channel"}, {"symmetric", true}}},
                {"input_activations",
                 {{"num_bits", 8}, {"type", "int"}, {"strategy", "token"}, {"dynamic", true}}}}}}},
            {"ignore", {"lm_head"}}}}};
}

// Every projection as weight [N, K] in `weight_dtype` and weight_scale BF16 [N, 1].
std::vector<HandTensor> int8_projections(const nlohmann::json& config, DType weight_dtype = DType::kI8) {
  std::vector<HandTensor> out;
  for (HandTensor t : testing::handmade_tensors(config)) {
    if (t.name.find("_proj.weight") == std::string::npos) {
      out.push_back(t);
      continue;
    }
    const std::string base = t.name.substr(0, t.name.size() - 6);  // "X."
    out.push_back({base + "weight", t.shape, HandTensor::Kind::kWeight, weight_dtype});
    out.push_back({base + "weight_scale", {t.shape[0], 1}, HandTensor::Kind::kNorm, DType::kBF16});
  }
  return out;
}

Plan int8_plan_at(const std::string& dir, int tp) {
  ParallelConfig parallel;
  parallel.tp = tp;
  return make_plan(Checkpoint::open(dir), parallel);
}

TEST(Int8Plan, RankTensorsAreTheEngineLoadersOwn) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = w8a8_llama();
  testing::write_handmade(dir, config, int8_projections(config), 1);
  const Plan plan = int8_plan_at(dir, 2);
  EXPECT_EQ(plan.quantization, Quantization::kInt8);
  std::map<std::string, const PlanParam*> params;
  for (const PlanParam& p : plan.ranks[1].params) params[p.name] = &p;
  struct Expected {
    std::string name;
    DType dtype;
    Shape shape;
  };
  const std::string layer = "model.layers.0.";
  const Expected expected[] = {
      {layer + "self_attn.qkv_proj.weight", DType::kI8, {256, 256}},  // q 128 rows, k and v 64
      {layer + "self_attn.qkv_proj.weight_scale", DType::kF32, {256, 1}},
      {layer + "self_attn.o_proj.weight", DType::kI8, {256, 128}},  // its 128 inputs of 256
      {layer + "self_attn.o_proj.weight_scale", DType::kF32, {256, 1}},  // whole: one scale a row
      {layer + "mlp.gate_up_proj.weight", DType::kI8, {512, 256}},
      {layer + "mlp.gate_up_proj.weight_scale", DType::kF32, {512, 1}},
      {layer + "mlp.down_proj.weight", DType::kI8, {256, 256}},
      {"lm_head.weight", DType::kBF16, {32, 256}},  // ignored: the model dtype, no scale
  };
  for (const Expected& e : expected) {
    ASSERT_TRUE(params.count(e.name)) << e.name;
    EXPECT_EQ(params[e.name]->dtype, e.dtype) << e.name;
    EXPECT_EQ(params[e.name]->shape, e.shape) << e.name;
  }
  EXPECT_FALSE(params.count("lm_head.weight_scale"));
  // Rank 1's o_proj takes inputs 128..255 of every row; its scale rows are all 256, from the start.
  const PlanParam& o = *params[layer + "self_attn.o_proj.weight"];
  ASSERT_EQ(o.pieces.size(), 1u);
  EXPECT_EQ(o.pieces[0].col_begin, 128u);
  // gate_up: rank 1's gate rows 256..511 of gate then of up, and their scales likewise.
  const PlanParam& gate_up_scale = *params[layer + "mlp.gate_up_proj.weight_scale"];
  ASSERT_EQ(gate_up_scale.pieces.size(), 2u);
  EXPECT_EQ(gate_up_scale.pieces[0].row_begin, 256u);
  EXPECT_EQ(gate_up_scale.pieces[1].row_begin, 256u);
}

TEST(Int8Plan, WeightsStoredInAnotherDtypeAreRefusedByName) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = w8a8_llama();
  testing::write_handmade(dir, config, int8_projections(config, DType::kBF16), 1);
  try {
    int8_plan_at(dir, 1);
    FAIL() << "bf16 weights under an int-quantized config must be refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupportedDtype) << what;
    EXPECT_NE(what.find("_proj.weight"), std::string::npos) << what;
    EXPECT_NE(what.find("I8"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace shardload
