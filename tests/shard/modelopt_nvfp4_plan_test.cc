// NVIDIA ModelOpt's NVFP4 (quant_method "modelopt", docs/layout.md "ModelOpt NVFP4") as the planner lays it
// out: the bytes (`weight`) and FP8 group scales cut on whole bytes and 16-value groups, each fused part's
// weight_scale_2 and input_scale kept side by side (vLLM 0.33's ModelOptNvFp4LinearMethod and
// ModelOptNvFp4FusedMoE hold them so), exclude_modules honoured, its config read from config.json or
// hf_quant_config.json, and what vLLM refuses refused before any read, naming the field or the tensor.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "handmade.h"
#include "shard_test_util.h"
#include "shardload/error.h"
#include "shardload/plan.h"

namespace shardload {
namespace {

using testing::HandTensor;

// Eight heads of 8, hidden 64, MLP 128 (at tp 8 o_proj keeps 8 of its 64 inputs: half a group).
nlohmann::json modelopt_llama(nlohmann::json quantization_config) {
  nlohmann::json c = {{"architectures", {"LlamaForCausalLM"}},
                      {"model_type", "llama"},
                      {"hidden_size", 64},
                      {"intermediate_size", 128},
                      {"num_attention_heads", 8},
                      {"num_key_value_heads", 8},
                      {"head_dim", 8},
                      {"num_hidden_layers", 1},
                      {"vocab_size", 64},
                      {"tie_word_embeddings", false},
                      {"torch_dtype", "bfloat16"}};
  if (!quantization_config.is_null()) c["quantization_config"] = std::move(quantization_config);
  return c;
}

// config.json's spelling (ModelOpt 0.39+): the MLP excluded by wildcard, lm_head by name.
nlohmann::json config_spelling() {
  return {{"quant_method", "modelopt"},
          {"quant_algo", "NVFP4"},
          {"group_size", 16},
          {"ignore", {"lm_head", "model.layers.*.mlp*"}},
          {"kv_cache_scheme", nullptr},
          {"producer", {{"name", "modelopt"}, {"version", "0.39.0"}}}};
}

// hf_quant_config.json's spelling (older ModelOpt exports, DeepSeek-R1-FP4's).
nlohmann::json hf_file_spelling() {
  return {{"producer", {{"name", "modelopt"}, {"version", "0.29.0"}}},
          {"quantization",
           {{"quant_algo", "NVFP4"},
            {"kv_cache_quant_algo", nullptr},
            {"group_size", 16},
            {"exclude_modules", {"lm_head", "model.layers.*.mlp*"}}}}};
}

// Attention projections as ModelOpt writes them: weight U8 [N, K/2], weight_scale F8_E4M3 [N, K/16],
// weight_scale_2 and input_scale F32 scalars; the MLP and lm_head stay bf16 (excluded).
std::vector<HandTensor> modelopt_projections(const nlohmann::json& config) {
  std::vector<HandTensor> out;
  for (HandTensor t : testing::handmade_tensors(config)) {
    if (t.name.find("self_attn.") == std::string::npos || t.name.find("_proj.weight") == std::string::npos) {
      out.push_back(t);
      continue;
    }
    const std::string base = t.name.substr(0, t.name.size() - 6);  // "X."
    out.push_back({base + "weight", {t.shape[0], t.shape[1] / 2}, HandTensor::Kind::kWeight, DType::kU8});
    out.push_back({base + "weight_scale", {t.shape[0], t.shape[1] / 16}, HandTensor::Kind::kNorm, DType::kF8E4M3});
    out.push_back({base + "weight_scale_2", {}, HandTensor::Kind::kNorm, DType::kF32});
    out.push_back({base + "input_scale", {}, HandTensor::Kind::kNorm, DType::kF32});
  }
  return out;
}

Plan plan_at(const std::string& dir, int tp, int ep = 1) {
  ParallelConfig parallel;
  parallel.tp = tp;
  parallel.ep = ep;
  return make_plan(Checkpoint::open(dir), parallel);
}

std::map<std::string, const PlanParam*> params_of(const RankPlan& rank) {
  std::map<std::string, const PlanParam*> params;
  for (const PlanParam& p : rank.params) params[p.name] = &p;
  return params;
}

void expect_rank_tensors(const Plan& plan) {
  EXPECT_EQ(plan.quantization, Quantization::kNvfp4);
  auto params = params_of(plan.ranks[1]);
  struct Expected {
    std::string name;
    DType dtype;
    Shape shape;
  };
  const std::string layer = "model.layers.0.";
  const Expected expected[] = {
      {layer + "self_attn.qkv_proj.weight", DType::kU8, {96, 32}},  // q, k, v 32 rows each
      {layer + "self_attn.qkv_proj.weight_scale", DType::kF8E4M3, {96, 4}},
      {layer + "self_attn.qkv_proj.weight_scale_2", DType::kF32, {3}},  // one per part, as read
      {layer + "self_attn.qkv_proj.input_scale", DType::kF32, {3}},
      {layer + "self_attn.o_proj.weight", DType::kU8, {64, 16}},  // its 32 inputs of 64
      {layer + "self_attn.o_proj.weight_scale", DType::kF8E4M3, {64, 2}},
      {layer + "self_attn.o_proj.weight_scale_2", DType::kF32, {1}},
      {layer + "mlp.gate_up_proj.weight", DType::kBF16, {128, 64}},  // excluded: the model dtype, no scale
      {"lm_head.weight", DType::kBF16, {32, 64}},
  };
  for (const Expected& e : expected) {
    ASSERT_TRUE(params.count(e.name)) << e.name;
    EXPECT_EQ(params[e.name]->dtype, e.dtype) << e.name;
    EXPECT_EQ(params[e.name]->shape, e.shape) << e.name;
  }
  EXPECT_FALSE(params.count(layer + "mlp.gate_up_proj.weight_scale_2"));
  // Rank 1's o_proj bytes start at byte 16 of each row (inputs 32..63), its scales at group 2.
  EXPECT_EQ(params[layer + "self_attn.o_proj.weight"]->pieces.at(0).col_begin, 16u);
  EXPECT_EQ(params[layer + "self_attn.o_proj.weight_scale"]->pieces.at(0).col_begin, 2u);
  // The weight_scale_2 table: q's, k's and v's, in that order, from their own tensors.
  const PlanParam& global = *params[layer + "self_attn.qkv_proj.weight_scale_2"];
  ASSERT_EQ(global.pieces.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(plan.sources[global.pieces[k].source].name, layer + "self_attn." + "qkv"[k] + "_proj.weight_scale_2");
    EXPECT_EQ(global.pieces[k].dst_offset, 4 * k);
  }
}

TEST(ModeloptNvfp4Plan, RankTensorsAreTheEngineLoadersOwnFromConfigJson) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = modelopt_llama(config_spelling());
  testing::write_handmade(dir, config, modelopt_projections(config), 1);
  expect_rank_tensors(plan_at(dir, 2));
}

TEST(ModeloptNvfp4Plan, HfQuantConfigJsonIsReadWhereConfigJsonHasNone) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = modelopt_llama(nullptr);
  testing::write_handmade(dir, config, modelopt_projections(modelopt_llama(config_spelling())), 1);
  testing::write_file(dir + "/hf_quant_config.json", hf_file_spelling().dump(2));
  expect_rank_tensors(plan_at(dir, 2));
  // Without it the same tensors are not a bf16 model: the U8 weight is refused, not read as values.
  std::filesystem::remove(dir + "/hf_quant_config.json");
  EXPECT_THROW(plan_at(dir, 2), Error);
}

TEST(ModeloptNvfp4Plan, AShareThatCutsAGroupIsRefusedNamingTheLayerAndSizes) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = modelopt_llama(config_spelling());
  testing::write_handmade(dir, config, modelopt_projections(config), 1);
  try {
    plan_at(dir, 8);  // o_proj: 8 of its 64 inputs a rank, half a 16-value group
    FAIL() << "a share of half a group must be refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << what;
    EXPECT_NE(what.find("self_attn.o_proj.weight"), std::string::npos) << what;
    EXPECT_NE(what.find("NVFP4 16-value groups"), std::string::npos) << what;
  }
}

// What vLLM 0.33 refuses or shardload does not read, refused from config.json alone, naming the field.
TEST(ModeloptNvfp4Config, UnsupportedFieldsAreRefusedNamingThem) {
  struct Bad {
    const char* why;
    nlohmann::json patch;  // merged into config.json's spelling
    std::string field;
  };
  const Bad cases[] = {
      {"FP8 is another algo", {{"quant_algo", "FP8"}}, "quantization_config.quant_algo"},
      {"per-layer formats", {{"quant_algo", "MIXED_PRECISION"}}, "quantization_config.quant_algo"},
      {"groups of 32", {{"group_size", 32}}, "quantization_config.group_size"},
      {"a quantized KV cache", {{"kv_cache_scheme", {{"type", "float"}, {"num_bits", 8}}}},
       "quantization_config.kv_cache_scheme"},
      {"an unknown field", {{"pre_quant_scale", true}}, "quantization_config.pre_quant_scale"},
      {"weight-only NVFP4", {{"quant_algo", "W4A16_NVFP4"}}, "quantization_config.quant_algo"},
      // vLLM 0.33 loads groups that all leave activations alone as W4A16_NVFP4, whatever quant_algo says.
      {"weight-only groups", {{"config_groups", {{"group_0", {{"targets", {"Linear"}}}}}}},
       "quantization_config.config_groups.group_0.input_activations"},
      {"a set wildcard", {{"ignore", {"model.layers.[01].mlp"}}}, "quantization_config.ignore"},
  };
  for (const Bad& bad : cases) {
    nlohmann::json q = config_spelling();
    q.merge_patch(bad.patch);
    try {
      ModelConfig::from_json(modelopt_llama(q));
      ADD_FAILURE() << bad.why << " must be refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << bad.why << ": " << e.what();
      EXPECT_EQ(e.field(), bad.field) << bad.why << ": " << e.what();
    }
  }
  // Lower case is vLLM's too (it upper-cases quant_algo).
  nlohmann::json lower = config_spelling();
  lower["quant_algo"] = "nvfp4";
  EXPECT_EQ(ModelConfig::from_json(modelopt_llama(lower)).quantization, Quantization::kNvfp4);
}

TEST(ModeloptNvfp4Config, HfQuantConfigJsonErrorsNameThatFile) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = modelopt_llama(nullptr);
  testing::write_handmade(dir, config, modelopt_projections(modelopt_llama(config_spelling())), 1);
  nlohmann::json hf = hf_file_spelling();
  hf["quantization"].erase("kv_cache_quant_algo");  // vLLM 0.33 requires it in this file
  testing::write_file(dir + "/hf_quant_config.json", hf.dump(2));
  try {
    plan_at(dir, 2);
    FAIL() << "an hf_quant_config.json without kv_cache_quant_algo must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_NE(e.file().find("hf_quant_config.json"), std::string::npos) << e.what();
    EXPECT_EQ(e.field(), "quantization.kv_cache_quant_algo") << e.what();
  }
  // vLLM 0.33 knows the file as ModelOpt's by its producer (and reads the model unquantized otherwise).
  hf = hf_file_spelling();
  hf["producer"]["name"] = "another";
  testing::write_file(dir + "/hf_quant_config.json", hf.dump(2));
  try {
    plan_at(dir, 2);
    FAIL() << "an hf_quant_config.json of another producer must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "producer.name") << e.what();
  }
}

// make-tiny's ModelOpt NVFP4 MoE at ep 2: every routed expert's tensors under vLLM's w13_ / w2_ names, the
// weight scalars side by side per local expert ([E_l, 2] for gate and up, [E_l] for down), the input scales
// of every expert on every rank, by logical expert (vLLM's FlashInfer NVFP4 MoE: use_global_sf).
TEST(ModeloptNvfp4Plan, ExpertsKeepWeightScalarsPerLocalExpertAndInputScalesOfEvery) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  make_tiny({.arch = "qwen3_moe", .out = dir, .seed = testing::test_seed(), .quant = "modelopt-nvfp4"});
  const Plan plan = plan_at(dir, 2, 2);
  const ModelConfig& m = plan.model;
  const uint64_t local = m.experts / 2;
  auto params = params_of(plan.ranks[0]);
  std::string layer;
  for (const auto& [name, p] : params) {
    if (name.ends_with("mlp.experts.w13_weight")) layer = name.substr(0, name.size() - std::string("w13_weight").size());
  }
  ASSERT_FALSE(layer.empty());
  const struct {
    std::string suffix;
    DType dtype;
    Shape shape;
  } expected[] = {
      {"w13_weight", DType::kU8, {local, 2 * m.moe_intermediate, m.hidden / 2}},
      {"w13_weight_scale", DType::kF8E4M3, {local, 2 * m.moe_intermediate, m.hidden / 16}},
      {"w13_weight_scale_2", DType::kF32, {local, 2}},
      {"w13_input_scale", DType::kF32, {m.experts, 2}},
      {"w2_weight", DType::kU8, {local, m.hidden, m.moe_intermediate / 2}},
      {"w2_weight_scale", DType::kF8E4M3, {local, m.hidden, m.moe_intermediate / 16}},
      {"w2_weight_scale_2", DType::kF32, {local}},
      {"w2_input_scale", DType::kF32, {m.experts}},
  };
  for (const auto& e : expected) {
    ASSERT_TRUE(params.count(layer + e.suffix)) << layer + e.suffix;
    EXPECT_EQ(params[layer + e.suffix]->dtype, e.dtype) << e.suffix;
    EXPECT_EQ(params[layer + e.suffix]->shape, e.shape) << e.suffix;
  }
  // Rank 1 holds experts E/2.. for its weights, but input scales from expert 0 on: row e is expert e's down_proj.
  auto rank1 = params_of(plan.ranks[1]);
  const PlanParam& input = *rank1.at(layer + "w2_input_scale");
  ASSERT_EQ(input.pieces.size(), m.experts);
  for (uint64_t e = 0; e < m.experts; ++e) {
    EXPECT_EQ(plan.sources[input.pieces[e].source].name, fmt::format("{}{}.down_proj.input_scale", layer, e));
    EXPECT_EQ(input.pieces[e].dst_offset, 4 * e);
  }
}

}  // namespace
}  // namespace shardload
