// FP8 checkpoints the planner must refuse, with a message naming the layer and the sizes: block-FP8 shards
// that do not fall on whole blocks, FP8 layers stored in another dtype, quantization methods shardload does
// not load.
#include <algorithm>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "handmade.h"
#include "shardload/error.h"
#include "shardload/plan.h"

namespace shardload {
namespace {

using testing::HandTensor;

// 2 heads of 128 over 2 kv heads: tp 2 cuts attention on whole 128-blocks; the MLP's 384 rows (3 blocks)
// split in 192 per rank, which is inside a block.
nlohmann::json block_fp8_llama() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", 128},
          {"intermediate_size", 384},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 2},
          {"head_dim", 128},
          {"num_hidden_layers", 1},
          {"vocab_size", 64},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"},
          {"quantization_config",
           {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}}}};
}

std::vector<HandTensor> with_fp8_projections(const nlohmann::json& config, bool block) {
  std::vector<HandTensor> out;
  for (HandTensor t : testing::handmade_tensors(config)) {
    const bool projection = t.name.find("_proj.weight") != std::string::npos;
    if (projection) t.dtype = DType::kF8E4M3;
    out.push_back(t);
    if (!projection) continue;
    const std::string base = t.name.substr(0, t.name.size() - 6);  // strip "weight"
    if (block) {
      out.push_back({base + "weight_scale_inv", {(t.shape[0] + 127) / 128, (t.shape[1] + 127) / 128},
                     HandTensor::Kind::kNorm, DType::kF32});
    } else {
      out.push_back({base + "weight_scale", {}, HandTensor::Kind::kNorm, DType::kF32});
    }
  }
  return out;
}

Plan plan_at(const std::string& dir, int tp) {
  ParallelConfig parallel;
  parallel.tp = tp;
  return make_plan(Checkpoint::open(dir), parallel);
}

TEST(Fp8ConfigErrors, BlockShardInsideABlockNamesTheLayerAndSizes) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = block_fp8_llama();
  testing::write_handmade(dir, config, with_fp8_projections(config, true), 1);
  const Plan whole = plan_at(dir, 1);  // tp 1 never cuts: legal
  EXPECT_EQ(whole.quantization, Quantization::kFp8Block);
  try {
    plan_at(dir, 2);
    FAIL() << "a split of 192 rows inside 128-row blocks must be refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << what;
    EXPECT_NE(what.find("model.layers.0.mlp.gate_up_proj.weight"), std::string::npos) << what;
    EXPECT_NE(what.find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << what;
    EXPECT_NE(what.find("192 rows per rank"), std::string::npos) << what;
    EXPECT_NE(what.find("128"), std::string::npos) << what;
  }
}

TEST(Fp8ConfigErrors, ALinearWeightNotInFp8IsRefusedByName) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  nlohmann::json config = block_fp8_llama();
  config["quantization_config"] = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}};
  std::vector<HandTensor> tensors = with_fp8_projections(config, false);
  for (HandTensor& t : tensors) {
    if (t.name == "model.layers.0.self_attn.o_proj.weight") t.dtype = DType::kBF16;
  }
  testing::write_handmade(dir, config, tensors, 1);
  try {
    plan_at(dir, 1);
    FAIL() << "a bf16 projection in an FP8 checkpoint must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupportedDtype) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.layers.0.self_attn.o_proj.weight"), std::string::npos) << e.what();
  }
}

TEST(Fp8ConfigErrors, OtherQuantizationMethodsAreRefused) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  nlohmann::json config = block_fp8_llama();
  config["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}};
  testing::write_handmade(dir, config, testing::handmade_tensors(config), 1);
  try {
    plan_at(dir, 1);
    FAIL() << "bitsandbytes is not loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_NE(std::string(e.what()).find("quant_method"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bitsandbytes"), std::string::npos) << e.what();
  }
}

// Qwen3's FP8 checkpoints list their routers and LM head in modules_to_not_convert (vLLM reads
// ignored_layers, then that): what shardload keeps unquantized anyway plans; a projection listed there
// would be bf16 bytes where shardload reads FP8 codes, and is refused naming the field and the module.
TEST(Fp8ConfigErrors, UnquantizedModulesListedAreRoutersOrHeadsOnly) {
  testing::TempDir tmp;
  nlohmann::json config = block_fp8_llama();
  config["quantization_config"]["modules_to_not_convert"] = {"lm_head"};
  const std::string listed = tmp.file("listed");
  testing::write_handmade(listed, config, with_fp8_projections(config, true), 1);
  EXPECT_EQ(plan_at(listed, 1).quantization, Quantization::kFp8Block);

  for (const char* field : {"ignored_layers", "modules_to_not_convert"}) {
    nlohmann::json bad = block_fp8_llama();
    bad["quantization_config"][field] = {"lm_head", "model.layers.0.self_attn.o_proj"};
    const std::string dir = tmp.file(std::string("bad-") + field);
    testing::write_handmade(dir, bad, with_fp8_projections(bad, true), 1);
    try {
      plan_at(dir, 1);
      ADD_FAILURE() << field << " naming a projection must be refused";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << what;
      EXPECT_NE(what.find(std::string("quantization_config.") + field), std::string::npos) << what;
      EXPECT_NE(what.find("model.layers.0.self_attn.o_proj"), std::string::npos) << what;
    }
  }
  nlohmann::json malformed = block_fp8_llama();
  malformed["quantization_config"]["ignored_layers"] = "lm_head";
  const std::string dir = tmp.file("malformed");
  testing::write_handmade(dir, malformed, with_fp8_projections(malformed, true), 1);
  EXPECT_THROW(plan_at(dir, 1), Error);
}

// llm-compressor's quantization_config for channel-wise FP8 weights, targets and ignore as given.
nlohmann::json ct_channel_config(nlohmann::json ignore) {
  nlohmann::json config = block_fp8_llama();
  config["quantization_config"] = {
      {"quant_method", "compressed-tensors"},
      {"format", "float-quantized"},
      {"config_groups",
       {{"group_0",
         {{"targets", {"Linear"}},
          {"weights", {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}, {"dynamic", false},
                       {"symmetric", true}}},
          {"input_activations", {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}}}}}}},
      {"ignore", std::move(ignore)}};
  return config;
}

// FP8 projections with [rows, 1] BF16 scales, except those `keep` names (left bf16, no scale).
std::vector<HandTensor> ct_channel_tensors(const nlohmann::json& config, const std::vector<std::string>& keep) {
  std::vector<HandTensor> out;
  for (HandTensor t : testing::handmade_tensors(config)) {
    const bool projection = t.name.find("_proj.weight") != std::string::npos &&
                            std::none_of(keep.begin(), keep.end(), [&](const std::string& k) {
                              return t.name.find(k) != std::string::npos;
                            });
    if (projection) t.dtype = DType::kF8E4M3;
    out.push_back(t);
    if (projection) {
      out.push_back({t.name.substr(0, t.name.size() - 6) + "weight_scale", {t.shape[0], 1},
                     HandTensor::Kind::kNorm, DType::kBF16});
    }
  }
  return out;
}

// An ignored projection (`ignore` by pattern) stays bf16 with no scale and plans as in a bf16 checkpoint;
// the rest are FP8 with per-row scales.
TEST(CompressedTensorsConfig, IgnoredProjectionsStayInTheModelDtype) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = ct_channel_config({"lm_head", "re:.*self_attn\\.o_proj$"});
  testing::write_handmade(dir, config, ct_channel_tensors(config, {"o_proj"}), 1);
  const Plan plan = plan_at(dir, 2);
  EXPECT_EQ(plan.model.quant_format, QuantFormat::kCompressedTensors);
  EXPECT_EQ(plan.model.weight_strategy, WeightStrategy::kChannel);
  std::map<std::string, const PlanParam*> params;
  for (const PlanParam& p : plan.ranks[0].params) params[p.name] = &p;
  ASSERT_TRUE(params.count("model.layers.0.self_attn.o_proj.weight"));
  EXPECT_EQ(params["model.layers.0.self_attn.o_proj.weight"]->dtype, DType::kBF16);
  EXPECT_FALSE(params.count("model.layers.0.self_attn.o_proj.weight_scale"));
  ASSERT_TRUE(params.count("model.layers.0.self_attn.qkv_proj.weight_scale"));
  EXPECT_EQ(params["model.layers.0.self_attn.qkv_proj.weight"]->dtype, DType::kF8E4M3);
  EXPECT_EQ(params["model.layers.0.self_attn.qkv_proj.weight_scale"]->dtype, DType::kF32);
  const Shape& qkv = params["model.layers.0.self_attn.qkv_proj.weight"]->shape;
  EXPECT_EQ(params["model.layers.0.self_attn.qkv_proj.weight_scale"]->shape, (Shape{qkv[0], 1}));
  // The row-parallel down_proj keeps every row's scale.
  EXPECT_EQ(params["model.layers.0.mlp.down_proj.weight_scale"]->shape, (Shape{128, 1}));
}

// A pattern that ignores one part of a fused layer (k_proj but not q_proj, v_proj) cannot make one rank
// tensor: refused naming the layer and the disagreeing part.
TEST(CompressedTensorsConfig, APartlyIgnoredFusedLayerIsRefusedNamingIt) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const nlohmann::json config = ct_channel_config({"lm_head", "re:.*k_proj"});
  testing::write_handmade(dir, config, ct_channel_tensors(config, {"k_proj"}), 1);
  try {
    plan_at(dir, 1);
    FAIL() << "q/v FP8 with k bf16 must be refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << what;
    EXPECT_NE(what.find("model.layers.0.self_attn.qkv_proj.weight"), std::string::npos) << what;
    EXPECT_NE(what.find("model.layers.0.self_attn.k_proj"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace shardload
