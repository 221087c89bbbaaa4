// GPTQ and AWQ int4 (docs/layout.md "GPTQ", "AWQ") as the planner lays them out: words, scales and zero points
// stored input-major (GPTQ's words pack inputs, [K / 8, N]; AWQ's outputs, [K, N / 8]) and kept so on the
// ranks, each fused part a column block of its tensor (PlanPiece::dst_pitch), as vLLM 0.33's methods hold them
// (tests/load/gptq_load_test.cc: the loaded bytes); GPTQ's g_idx read by no rank; the config fields vLLM refuses
// refused by name, and a share that cuts a group refused before any read.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "config_refusal.h"
#include "handmade.h"
#include "shardload/error.h"
#include "shardload/plan.h"

namespace shardload {
namespace {

using testing::HandTensor;

// Eight heads of 8 over eight KV heads, hidden 64, MLP 128, int4 in 32-value groups.
nlohmann::json gptq_llama() {
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
           {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 32}, {"desc_act", false}, {"sym", true}}}};
}

// Every projection [N, K] as GPTQ writes it: qweight I32 [K/8, N], scales F16 [K/32, N], qzeros I32
// [K/32, N/8], g_idx I32 [K].
std::vector<HandTensor> gptq_projections(const nlohmann::json& config) {
  std::vector<HandTensor> out;
  for (HandTensor t : testing::handmade_tensors(config)) {
    if (t.name.find("_proj.weight") == std::string::npos) {
      out.push_back(t);
      continue;
    }
    const std::string base = t.name.substr(0, t.name.size() - 6);  // "X."
    const uint64_t n = t.shape[0], k = t.shape[1];
    out.push_back({base + "qweight", {k / 8, n}, HandTensor::Kind::kWeight, DType::kI32});
    out.push_back({base + "scales", {k / 32, n}, HandTensor::Kind::kNorm, DType::kF16});
    out.push_back({base + "qzeros", {k / 32, n / 8}, HandTensor::Kind::kWeight, DType::kI32});
    out.push_back({base + "g_idx", {k}, HandTensor::Kind::kWeight, DType::kI32});
  }
  return out;
}

Plan gptq_plan_at(const std::string& dir, int tp) {
  ParallelConfig parallel;
  parallel.tp = tp;
  return make_plan(Checkpoint::open(dir), parallel);
}

TEST(GptqPlan, RankTensorsAreInputMajorAsTheEngineHoldsThem) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = gptq_llama();
  testing::write_handmade(dir, config, gptq_projections(config), 1);
  const Plan plan = gptq_plan_at(dir, 2);
  EXPECT_EQ(plan.quantization, Quantization::kGptq);
  std::map<std::string, const PlanParam*> params;
  for (const PlanParam& p : plan.ranks[1].params) params[p.name] = &p;
  struct Expected {
    std::string name;
    DType dtype;
    Shape shape;
  };
  const std::string layer = "model.layers.0.";
  const Expected expected[] = {
      {layer + "self_attn.qkv_proj.qweight", DType::kI32, {8, 96}},  // q, k, v 32 columns each
      {layer + "self_attn.qkv_proj.scales", DType::kBF16, {2, 96}},  // in the model dtype
      {layer + "self_attn.qkv_proj.qzeros", DType::kI32, {2, 12}},
      {layer + "self_attn.o_proj.qweight", DType::kI32, {4, 64}},  // its 32 inputs of 64
      {layer + "self_attn.o_proj.scales", DType::kBF16, {1, 64}},
      {layer + "self_attn.o_proj.qzeros", DType::kI32, {1, 8}},
      {layer + "mlp.gate_up_proj.qweight", DType::kI32, {8, 128}},
      {layer + "mlp.down_proj.qweight", DType::kI32, {8, 64}},
      {"lm_head.weight", DType::kBF16, {32, 64}},
  };
  for (const Expected& e : expected) {
    ASSERT_TRUE(params.count(e.name)) << e.name;
    EXPECT_EQ(params[e.name]->dtype, e.dtype) << e.name;
    EXPECT_EQ(params[e.name]->shape, e.shape) << e.name;
  }
  for (const auto& [name, param] : params) EXPECT_FALSE(name.ends_with("g_idx")) << name;
  // q, k and v: each rank 1's 32 output columns (source columns 32..63), side by side, 96 columns a row.
  const PlanParam& qkv = *params[layer + "self_attn.qkv_proj.qweight"];
  ASSERT_EQ(qkv.pieces.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    const PlanPiece& piece = qkv.pieces[k];
    EXPECT_EQ(plan.sources[piece.source].name, layer + "self_attn." + "qkv"[k] + "_proj.qweight");
    EXPECT_EQ(piece.row_begin, 0u);
    EXPECT_EQ(piece.row_end, 8u);
    EXPECT_EQ(piece.col_begin, 32u);
    EXPECT_EQ(piece.col_end, 64u);
    EXPECT_EQ(piece.dst_offset, 32 * 4 * k);
    EXPECT_EQ(piece.dst_pitch, 96u);
  }
  // Row-parallel o_proj: words 4..7 (inputs 32..63) of every column, whole rows of its source.
  const PlanPiece& o = params[layer + "self_attn.o_proj.qweight"]->pieces.at(0);
  EXPECT_EQ(o.row_begin, 4u);
  EXPECT_EQ(o.row_end, 8u);
  EXPECT_EQ(o.col_end - o.col_begin, 64u);
  EXPECT_EQ(params[layer + "self_attn.o_proj.scales"]->pieces.at(0).row_begin, 1u);  // group 1
}

TEST(GptqPlan, AShareThatCutsAGroupIsRefusedNamingTheLayerAndSizes) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = gptq_llama();
  testing::write_handmade(dir, config, gptq_projections(config), 1);
  try {
    gptq_plan_at(dir, 4);  // o_proj: 16 of its 64 inputs a rank, half a 32-value group
    FAIL() << "a share of half a group must be refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << what;
    EXPECT_NE(what.find("self_attn.o_proj.qweight"), std::string::npos) << what;
    EXPECT_NE(what.find("GPTQ int4 32-value groups"), std::string::npos) << what;
  }
}

TEST(GptqConfig, WhatVllmRefusesIsRefusedNamingTheField) {
  const std::pair<const char*, nlohmann::json> refused[] = {
      {"desc_act", true},  {"sym", false},      {"bits", 3},           {"lm_head", true},
      {"group_size", 0},   {"pack_dtype", "int16"}, {"checkpoint_format", "marlin"},
      {"dynamic", {{"-:.*mlp.*", nlohmann::json::object()}}},
  };
  for (const auto& [field, value] : refused) {
    nlohmann::json config = gptq_llama();
    config["quantization_config"][field] = value;
    testing::expect_config_refused_naming(config, std::string("quantization_config.") + field);
  }
  // Activation reordering with one group a column is a no-op (vLLM's reading too): accepted.
  nlohmann::json channel = gptq_llama();
  channel["quantization_config"]["group_size"] = -1;
  channel["quantization_config"]["desc_act"] = true;
  const ModelConfig m = ModelConfig::from_json(channel);
  EXPECT_EQ(m.quantization, Quantization::kGptq);
  EXPECT_EQ(m.group_size, kWholeRow);
}

// AWQ (quant_method awq, GEMM): the same model with qweight I32 [K, N/8] packed along N, qzeros [K/32, N/8],
// scales F16 [K/32, N].
nlohmann::json awq_llama() {
  nlohmann::json config = gptq_llama();
  config["quantization_config"] = {
      {"quant_method", "awq"}, {"bits", 4}, {"group_size", 32}, {"zero_point", true}, {"version", "gemm"}};
  return config;
}

std::vector<HandTensor> awq_projections(const nlohmann::json& config) {
  std::vector<HandTensor> out;
  for (HandTensor t : testing::handmade_tensors(config)) {
    if (t.name.find("_proj.weight") == std::string::npos) {
      out.push_back(t);
      continue;
    }
    const std::string base = t.name.substr(0, t.name.size() - 6);  // "X."
    const uint64_t n = t.shape[0], k = t.shape[1];
    out.push_back({base + "qweight", {k, n / 8}, HandTensor::Kind::kWeight, DType::kI32});
    out.push_back({base + "qzeros", {k / 32, n / 8}, HandTensor::Kind::kWeight, DType::kI32});
    out.push_back({base + "scales", {k / 32, n}, HandTensor::Kind::kNorm, DType::kF16});
  }
  return out;
}

TEST(AwqPlan, WordsOfOutputsAreCutWholeAndLaidSideBySide) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = awq_llama();
  testing::write_handmade(dir, config, awq_projections(config), 1);
  const Plan plan = gptq_plan_at(dir, 2);
  EXPECT_EQ(plan.quantization, Quantization::kAwq);
  std::map<std::string, const PlanParam*> params;
  for (const PlanParam& p : plan.ranks[1].params) params[p.name] = &p;
  const std::string layer = "model.layers.0.";
  const std::pair<std::string, Shape> expected[] = {
      {layer + "self_attn.qkv_proj.qweight", {64, 12}},  // q, k, v: 4 words (32 outputs) each
      {layer + "self_attn.qkv_proj.qzeros", {2, 12}},
      {layer + "self_attn.qkv_proj.scales", {2, 96}},
      {layer + "self_attn.o_proj.qweight", {32, 8}},  // its 32 inputs of 64, every output
      {layer + "self_attn.o_proj.scales", {1, 64}},
      {layer + "mlp.gate_up_proj.qweight", {64, 16}},
  };
  for (const auto& [name, shape] : expected) {
    ASSERT_TRUE(params.count(name)) << name;
    EXPECT_EQ(params[name]->shape, shape) << name;
  }
  const PlanParam& qkv = *params[layer + "self_attn.qkv_proj.qweight"];
  ASSERT_EQ(qkv.pieces.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {  // rank 1's words 4..7 of each part's 8, every input row
    EXPECT_EQ(qkv.pieces[k].row_end - qkv.pieces[k].row_begin, 64u);
    EXPECT_EQ(qkv.pieces[k].col_begin, 4u);
    EXPECT_EQ(qkv.pieces[k].col_end, 8u);
    EXPECT_EQ(qkv.pieces[k].dst_offset, 4 * 4 * k);
    EXPECT_EQ(qkv.pieces[k].dst_pitch, 12u);
  }
}

TEST(AwqConfig, WhatVllmRefusesIsRefusedNamingTheField) {
  const std::pair<const char*, nlohmann::json> refused[] = {
      {"bits", 8}, {"group_size", -1}, {"zero_point", "yes"}, {"version", "gemv"}, {"lm_head", true},
  };
  for (const auto& [field, value] : refused) {
    nlohmann::json config = awq_llama();
    config["quantization_config"][field] = value;
    testing::expect_config_refused_naming(config, std::string("quantization_config.") + field);
  }
  // AutoAWQ's own spelling of the fields reads the same.
  nlohmann::json autoawq = awq_llama();
  autoawq["quantization_config"] = {
      {"quant_method", "awq"}, {"w_bit", 4}, {"q_group_size", 64}, {"zero_point", false}, {"version", "GEMM"}};
  const ModelConfig m = ModelConfig::from_json(autoawq);
  EXPECT_EQ(m.quantization, Quantization::kAwq);
  EXPECT_EQ(m.group_size, 64u);
  EXPECT_FALSE(m.zero_points);
}

}  // namespace
}  // namespace shardload
