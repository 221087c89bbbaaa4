// llm-compressor's NVFP4 weights (compressed-tensors nvfp4-pack-quantized, docs/layout.md
// "compressed-tensors NVFP4") as the planner lays them out: bytes of two FP4 values and FP8 group scales
// cut on whole bytes and 16-value groups, each fused part's global scales kept side by side (vLLM 0.33's
// loaders' own), and a share that cuts a group refused before any read, naming the tensor and the sizes.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "handmade.h"
#include "shardload/error.h"
#include "shardload/plan.h"

namespace shardload {
namespace {

using testing::HandTensor;

// Eight heads of 8 over eight KV heads, hidden 64, MLP 128: at tp 8 o_proj keeps 8 of its 64 inputs.
nlohmann::json nvfp4_llama() {
  const nlohmann::json args = {{"num_bits", 4}, {"type", "float"}, {"strategy", "tensor_group"}, {"group_size", 16}};
  nlohmann::json inputs = args;
  inputs["dynamic"] = "local";
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_attention_heads", 8},
          {"num_key_value_heads", 8},
          {"head_dim", 8},
          {"num_hidden_layers", 1},
          {"vocab_size", 64},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"},
          {"quantization_config",
           {{"quant_method", "compressed-tensors"},
            {"format", "nvfp4-pack-quantized"},
            {"config_groups",
             {{"group_0", {{"targets", {"Linear"}}, {"weights", args}, {"input_activations", inputs}}}}},
            {"ignore", {"lm_head"}}}}};
}

// Every projection as llm-compressor writes it: weight_packed U8 [N, K/2], weight_scale F8_E4M3 [N, K/16],
// weight_global_scale and input_global_scale F32 [1].
std::vector<HandTensor> nvfp4_projections(const nlohmann::json& config) {
  std::vector<HandTensor> out;
  for (HandTensor t : testing::handmade_tensors(config)) {
    if (t.name.find("_proj.weight") == std::string::npos) {
      out.push_back(t);
      continue;
    }
    const std::string base = t.name.substr(0, t.name.size() - 6);  // "X."
    out.push_back({base + "weight_packed", {t.shape[0], t.shape[1] / 2}, HandTensor::Kind::kWeight, DType::kU8});
    out.push_back({base + "weight_scale", {t.shape[0], t.shape[1] / 16}, HandTensor::Kind::kNorm, DType::kF8E4M3});
    out.push_back({base + "weight_global_scale", {1}, HandTensor::Kind::kNorm, DType::kF32});
    out.push_back({base + "input_global_scale", {1}, HandTensor::Kind::kNorm, DType::kF32});
  }
  return out;
}

Plan nvfp4_plan_at(const std::string& dir, int tp) {
  ParallelConfig parallel;
  parallel.tp = tp;
  return make_plan(Checkpoint::open(dir), parallel);
}

TEST(Nvfp4Plan, RankTensorsAreTheEngineLoadersOwn) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = nvfp4_llama();
  testing::write_handmade(dir, config, nvfp4_projections(config), 1);
  const Plan plan = nvfp4_plan_at(dir, 2);
  EXPECT_EQ(plan.quantization, Quantization::kNvfp4);
  std::map<std::string, const PlanParam*> params;
  for (const PlanParam& p : plan.ranks[1].params) params[p.name] = &p;
  struct Expected {
    std::string name;
    DType dtype;
    Shape shape;
  };
  const std::string layer = "model.layers.0.";
  const Expected expected[] = {
      {layer + "self_attn.qkv_proj.weight_packed", DType::kU8, {96, 32}},  // q, k, v 32 rows each
      {layer + "self_attn.qkv_proj.weight_scale", DType::kF8E4M3, {96, 4}},
      {layer + "self_attn.qkv_proj.weight_global_scale", DType::kF32, {3}},  // one per part
      {layer + "self_attn.qkv_proj.input_global_scale", DType::kF32, {3}},
      {layer + "self_attn.o_proj.weight_packed", DType::kU8, {64, 16}},  // its 32 inputs of 64
      {layer + "self_attn.o_proj.weight_scale", DType::kF8E4M3, {64, 2}},
      {layer + "self_attn.o_proj.weight_global_scale", DType::kF32, {1}},
      {layer + "mlp.gate_up_proj.weight_global_scale", DType::kF32, {2}},
      {"lm_head.weight", DType::kBF16, {32, 64}},  // ignored: the model dtype, no scale
  };
  for (const Expected& e : expected) {
    ASSERT_TRUE(params.count(e.name)) << e.name;
    EXPECT_EQ(params[e.name]->dtype, e.dtype) << e.name;
    EXPECT_EQ(params[e.name]->shape, e.shape) << e.name;
  }
  // Rank 1's o_proj bytes start at byte 16 of each row (inputs 32..63), its scales at group 2.
  EXPECT_EQ(params[layer + "self_attn.o_proj.weight_packed"]->pieces.at(0).col_begin, 16u);
  EXPECT_EQ(params[layer + "self_attn.o_proj.weight_scale"]->pieces.at(0).col_begin, 2u);
  // The global scale table: q's, k's and v's, in that order, from their own tensors.
  const PlanParam& global = *params[layer + "self_attn.qkv_proj.weight_global_scale"];
  ASSERT_EQ(global.pieces.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(plan.sources[global.pieces[k].source].name,
              layer + "self_attn." + "qkv"[k] + "_proj.weight_global_scale");
    EXPECT_EQ(global.pieces[k].dst_offset, 4 * k);
  }
}

TEST(Nvfp4Plan, AShareThatCutsAGroupIsRefusedNamingTheLayerAndSizes) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = nvfp4_llama();
  testing::write_handmade(dir, config, nvfp4_projections(config), 1);
  try {
    nvfp4_plan_at(dir, 8);  // o_proj: 8 of its 64 inputs a rank, half a 16-value group
    FAIL() << "a share of half a group must be refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << what;
    EXPECT_NE(what.find("self_attn.o_proj.weight_packed"), std::string::npos) << what;
    EXPECT_NE(what.find("NVFP4 16-value groups"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace shardload
