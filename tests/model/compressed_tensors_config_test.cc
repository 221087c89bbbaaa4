// compressed-tensors quantization_config as llm-compressor writes it (docs/layout.md
// "compressed-tensors"): what is read from it, which modules it quantizes (targets minus ignore, `re:`
// matched from the start as Python's re.match), and what is refused naming the field.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "shardload/error.h"
#include "shardload/model.h"

namespace shardload {
namespace {

using nlohmann::json;

json group(const std::string& strategy, bool dynamic_inputs) {
  json weights = {{"num_bits", 8}, {"type", "float"}, {"strategy", strategy}, {"dynamic", false}, {"symmetric", true}};
  if (strategy == "block") weights["block_structure"] = {128, 128};
  return {{"targets", {"Linear"}},
          {"weights", weights},
          {"input_activations",
           {{"num_bits", 8}, {"type", "float"}, {"strategy", dynamic_inputs ? "token" : "tensor"},
            {"dynamic", dynamic_inputs}}}};
}

json config_with(json quantization) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", 128},
          {"intermediate_size", 256},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 2},
          {"num_hidden_layers", 1},
          {"vocab_size", 64},
          {"torch_dtype", "bfloat16"},
          {"quantization_config", std::move(quantization)}};
}

json ct(json groups, json ignore = json::array({"lm_head"})) {
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"config_groups", std::move(groups)},
          {"ignore", std::move(ignore)},
          {"kv_cache_scheme", nullptr},
          {"sparsity_config", json::object()}};
}

TEST(CompressedTensorsConfig, StrategiesAndSchemesAreRead) {
  ModelConfig m = ModelConfig::from_json(config_with(ct({{"group_0", group("tensor", false)}})));
  EXPECT_EQ(m.quant_format, QuantFormat::kCompressedTensors);
  EXPECT_EQ(m.weight_strategy, WeightStrategy::kTensor);
  EXPECT_EQ(m.quantization, Quantization::kFp8);
  EXPECT_TRUE(m.static_activations);
  EXPECT_EQ(quantization_label(m, m.quantization), "compressed-tensors");

  m = ModelConfig::from_json(config_with(ct({{"group_0", group("channel", true)}})));
  EXPECT_EQ(m.weight_strategy, WeightStrategy::kChannel);
  EXPECT_EQ(m.quantization, Quantization::kFp8Block);
  EXPECT_EQ(m.block_rows, 1u);
  EXPECT_EQ(m.block_cols, kWholeRow);
  EXPECT_FALSE(m.static_activations);

  m = ModelConfig::from_json(config_with(ct({{"group_0", group("block", true)}})));
  EXPECT_EQ(m.weight_strategy, WeightStrategy::kBlock);
  EXPECT_EQ(m.block_rows, 128u);
  EXPECT_EQ(m.block_cols, 128u);

  // Older checkpoints: compression_config; weight-only (no input_activations) has no input scales.
  json older = config_with(nullptr);
  json weight_only = group("channel", true);
  weight_only.erase("input_activations");
  older["compression_config"] = ct({{"group_0", weight_only}});
  m = ModelConfig::from_json(older);
  EXPECT_EQ(m.weight_strategy, WeightStrategy::kChannel);
  EXPECT_FALSE(m.static_activations);
}

TEST(CompressedTensorsConfig, TargetsMinusIgnoreMatchedFromTheStart) {
  json q = ct({{"group_0", group("channel", true)}}, {"lm_head", "re:.*mlp\\.gate$", "re:layers"});
  q["config_groups"]["group_0"]["targets"] = {"re:model\\.layers\\.[0-9]+\\..*_proj", "lm_head"};
  const ModelConfig m = ModelConfig::from_json(config_with(q));
  EXPECT_TRUE(m.module_quantized("model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(m.module_quantized("model.layers.12.mlp.experts.3.down_proj"));
  EXPECT_FALSE(m.module_quantized("model.layers.1.mlp.gate")) << "ignored by pattern";
  EXPECT_FALSE(m.module_quantized("lm_head")) << "ignored by name";
  EXPECT_FALSE(m.module_quantized("model.embed_tokens")) << "not targeted";
  // re.match anchors at the start only: "re:layers" does not match "model.layers...", and a target
  // pattern matches a longer name.
  EXPECT_TRUE(m.module_quantized("model.layers.0.mlp.gate_proj"));
}

TEST(CompressedTensorsConfig, WhatIsNotFp8IsRefusedNamingTheField) {
  struct Bad {
    std::string what;
    json quantization;
    std::string field;
  };
  json int8 = group("channel", true);
  int8["weights"]["type"] = "int";
  json four_bit = group("tensor", true);
  four_bit["weights"]["num_bits"] = 4;
  json static_channel = group("channel", false);
  json bad_regex = ct({{"group_0", group("tensor", true)}}, {"re:(?=lookahead)"});
  json kv_cache = ct({{"group_0", group("tensor", true)}});
  kv_cache["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}};
  json other_format = ct({{"group_0", group("tensor", true)}});
  other_format["format"] = "pack-quantized";
  json no_block = group("block", true);
  no_block["weights"].erase("block_structure");
  const Bad cases[] = {
      {"int8 weights", ct({{"group_0", int8}}), "quantization_config.config_groups.group_0.weights.type"},
      {"4-bit weights", ct({{"group_0", four_bit}}), "quantization_config.config_groups.group_0.weights.num_bits"},
      {"static activations with channel weights", ct({{"group_0", static_channel}}),
       "quantization_config.config_groups.group_0.input_activations.dynamic"},
      {"two schemes", ct({{"group_0", group("tensor", true)}, {"group_1", group("channel", true)}}),
       "quantization_config.config_groups.group_1"},
      {"a lookahead", bad_regex, "quantization_config.ignore"},
      {"a KV cache scheme", kv_cache, "quantization_config.kv_cache_scheme"},
      {"another format", other_format, "quantization_config.format"},
      {"block without its size", ct({{"group_0", no_block}}),
       "quantization_config.config_groups.group_0.weights.block_structure"},
      {"no config group", ct(json::object()), "quantization_config.config_groups"},
  };
  for (const Bad& bad : cases) {
    try {
      ModelConfig::from_json(config_with(bad.quantization));
      ADD_FAILURE() << bad.what << " must be refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << bad.what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(bad.field), std::string::npos) << bad.what << ": " << e.what();
      EXPECT_EQ(std::string(e.what()).find("quantization_config.quantization_config"), std::string::npos)
          << bad.what << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace shardload
