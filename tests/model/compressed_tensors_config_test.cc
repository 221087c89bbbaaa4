// compressed-tensors quantization_config as llm-compressor writes it (docs/layout.md
// "compressed-tensors"): what is read from it, which modules it quantizes (targets minus ignore, `re:`
// matched from the start as Python's re.match), and what is refused naming the field.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "shardload/error.h"
#include "shardload/model.h"
#include "shardload/weight_format.h"

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

// llm-compressor's W4A16 / W4A16_ASYM / W8A16 groups (pack-quantized).
json int_group(int bits, const std::string& strategy, bool symmetric) {
  json weights = {{"num_bits", bits}, {"type", "int"}, {"strategy", strategy}, {"dynamic", false},
                  {"symmetric", symmetric}, {"actorder", nullptr}};
  weights["group_size"] = strategy == "group" ? json(128) : json(nullptr);
  return {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", nullptr},
          {"output_activations", nullptr}, {"format", "pack-quantized"}};
}

json packed(json groups) {
  json q = ct(std::move(groups));
  q["format"] = "pack-quantized";
  return q;
}

TEST(CompressedTensorsConfig, PackedIntegerWeightsAreRead) {
  ModelConfig m = ModelConfig::from_json(config_with(packed({{"group_0", int_group(4, "group", true)}})));
  EXPECT_EQ(m.quantization, Quantization::kWna16);
  EXPECT_EQ(m.weight_strategy, WeightStrategy::kGroup);
  EXPECT_EQ(m.weight_bits, 4u);
  EXPECT_EQ(m.group_size, 128u);
  EXPECT_FALSE(m.zero_points);
  EXPECT_EQ(quantization_label(m, m.quantization), "compressed-tensors");

  m = ModelConfig::from_json(config_with(packed({{"group_0", int_group(4, "group", false)}})));
  EXPECT_TRUE(m.zero_points);

  m = ModelConfig::from_json(config_with(packed({{"group_0", int_group(8, "channel", true)}})));
  EXPECT_EQ(m.weight_strategy, WeightStrategy::kChannel);
  EXPECT_EQ(m.weight_bits, 8u);
  EXPECT_EQ(m.group_size, kWholeRow);

  // GPTQModifier's actorder "weight" stores the weights in their own order: read as any other.
  json weight_order = int_group(4, "group", true);
  weight_order["weights"]["actorder"] = "weight";
  m = ModelConfig::from_json(config_with(packed({{"group_0", weight_order}})));
  EXPECT_EQ(m.quantization, Quantization::kWna16);
}

TEST(CompressedTensorsConfig, PackedWeightsOutsideTheLoadedSchemesAreRefusedNamingTheField) {
  struct Bad {
    std::string what;
    json group;
    std::string field;
  };
  json three_bits = int_group(4, "group", true);
  three_bits["weights"]["num_bits"] = 3;
  json float_type = int_group(8, "channel", true);
  float_type["weights"]["type"] = "float";
  json tensor = int_group(4, "tensor", true);
  json g_idx = int_group(4, "group", true);
  g_idx["weights"]["actorder"] = "group";
  json dynamic_order = int_group(4, "group", true);
  dynamic_order["weights"]["actorder"] = "dynamic";
  json odd_group = int_group(4, "group", true);
  odd_group["weights"]["group_size"] = 12;
  json no_group = int_group(4, "group", true);
  no_group["weights"]["group_size"] = nullptr;
  json w4a8 = int_group(4, "group", true);
  w4a8["input_activations"] = {{"num_bits", 8}, {"type", "int"}, {"dynamic", true}};
  json nvfp4_group = int_group(4, "group", true);
  nvfp4_group["format"] = "nvfp4-pack-quantized";
  const Bad cases[] = {
      {"3-bit weights", three_bits, "weights.num_bits"},
      {"float weights", float_type, "weights.type"},
      {"a scale per tensor", tensor, "weights.strategy"},
      {"a g_idx (actorder group)", g_idx, "weights.actorder"},
      {"a g_idx (actorder dynamic)", dynamic_order, "weights.actorder"},
      {"a group of 12 int4 values (not whole words)", odd_group, "weights.group_size"},
      {"a group strategy without its size", no_group, "weights.group_size"},
      {"quantized activations (W4A8)", w4a8, "input_activations"},
      {"a group of another format", nvfp4_group, "group_0.format"},
  };
  for (const Bad& bad : cases) {
    try {
      ModelConfig::from_json(config_with(packed({{"group_0", bad.group}})));
      ADD_FAILURE() << bad.what << " must be refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << bad.what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("quantization_config.config_groups.group_0." + bad.field.substr(
                                               bad.field.starts_with("group_0.") ? 8 : 0)),
                std::string::npos)
          << bad.what << ": " << e.what();
    }
  }
}

// llm-compressor's W8A8 int8 group (int-quantized): channel weights, dynamic per-token activations.
json w8a8_group() {
  json weights = {{"num_bits", 8}, {"type", "int"}, {"strategy", "channel"}, {"dynamic", false},
                  {"symmetric", true}, {"actorder", nullptr}, {"group_size", nullptr}};
  json inputs = {{"num_bits", 8}, {"type", "int"}, {"strategy", "token"}, {"dynamic", true}, {"symmetric", true}};
  return {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", inputs},
          {"output_activations", nullptr}, {"format", "int-quantized"}};
}

json int_quantized(json groups) {
  json q = ct(std::move(groups));
  q["format"] = "int-quantized";
  return q;
}

TEST(CompressedTensorsConfig, Int8WeightsWithDynamicActivationsAreRead) {
  const ModelConfig m = ModelConfig::from_json(config_with(int_quantized({{"group_0", w8a8_group()}})));
  EXPECT_EQ(m.quantization, Quantization::kInt8);
  EXPECT_EQ(m.weight_strategy, WeightStrategy::kChannel);
  EXPECT_EQ(m.block_cols, kWholeRow);
  EXPECT_EQ(quantization_name(m.quantization), "int8");
  const WeightFormat format = weight_format(m, false);
  EXPECT_EQ(format.checkpoint_dtype, DType::kI8);
  EXPECT_EQ(format.rank_dtype, DType::kI8);
  ASSERT_EQ(format.companions.size(), 1u);
  EXPECT_EQ(format.companions[0].checkpoint_suffix, "weight_scale");
  EXPECT_TRUE(format.checks_scales);
}

TEST(CompressedTensorsConfig, Int8SchemesOutsideW8a8AreRefusedNamingTheField) {
  struct Bad {
    std::string what;
    json group;
    std::string field;
  };
  const auto with = [](const char* part, const char* field, json value) {
    json g = w8a8_group();
    g[part][field] = std::move(value);
    return g;
  };
  json no_inputs = w8a8_group();
  no_inputs["input_activations"] = nullptr;
  const Bad cases[] = {
      {"4-bit weights", with("weights", "num_bits", 4), "weights.num_bits"},
      {"float weights", with("weights", "type", "float"), "weights.type"},
      {"zero points", with("weights", "symmetric", false), "weights.symmetric"},
      {"a scale per tensor", with("weights", "strategy", "tensor"), "weights.strategy"},
      {"groups", with("weights", "strategy", "group"), "weights.strategy"},
      {"static activations", with("input_activations", "dynamic", false), "input_activations.dynamic"},
      {"asymmetric activations", with("input_activations", "symmetric", false), "input_activations.symmetric"},
      {"activations per tensor", with("input_activations", "strategy", "tensor"), "input_activations.strategy"},
      {"FP8 activations", with("input_activations", "type", "float"), "input_activations.type"},
      {"no quantized activations (W8A16)", no_inputs, "input_activations"},
  };
  for (const Bad& bad : cases) {
    try {
      ModelConfig::from_json(config_with(int_quantized({{"group_0", bad.group}})));
      ADD_FAILURE() << bad.what << " must be refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << bad.what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("quantization_config.config_groups.group_0." + bad.field),
                std::string::npos)
          << bad.what << ": " << e.what();
    }
  }
}

// llm-compressor's NVFP4 group (nvfp4-pack-quantized); `activations`: NVFP4 (else NVFP4A16).
json nvfp4_group(bool activations = true) {
  json args = {{"num_bits", 4}, {"type", "float"}, {"strategy", "tensor_group"}, {"group_size", 16},
               {"symmetric", true}, {"dynamic", false}};
  json inputs = args;
  inputs["dynamic"] = "local";
  return {{"targets", {"Linear"}}, {"weights", args}, {"input_activations", activations ? inputs : json(nullptr)},
          {"output_activations", nullptr}, {"format", "nvfp4-pack-quantized"}};
}

json nvfp4_config(json groups) {
  json q = ct(std::move(groups));
  q["format"] = "nvfp4-pack-quantized";
  return q;
}

TEST(CompressedTensorsConfig, Nvfp4IsReadWithAndWithoutFp4Activations) {
  ModelConfig m = ModelConfig::from_json(config_with(nvfp4_config({{"group_0", nvfp4_group()}})));
  EXPECT_EQ(m.quantization, Quantization::kNvfp4);
  EXPECT_EQ(quantization_name(m.quantization), "nvfp4");
  WeightFormat format = weight_format(m, false);
  EXPECT_EQ(format.checkpoint_dtype, DType::kU8);
  EXPECT_EQ(format.pack_factor, 2u);
  EXPECT_EQ(format.block_cols, 16u);
  ASSERT_EQ(format.companions.size(), 3u);  // weight_scale, weight_global_scale, input_global_scale
  EXPECT_EQ(format.companions[0].stored_dtype, DType::kF8E4M3);
  EXPECT_EQ(format.companions[1].layout, CompanionLayout::kPartTable);
  EXPECT_EQ(format.companions[2].checkpoint_suffix, "input_global_scale");

  m = ModelConfig::from_json(config_with(nvfp4_config({{"group_0", nvfp4_group(false)}})));
  format = weight_format(m, false);
  EXPECT_EQ(format.companions.size(), 2u);  // NVFP4A16: no input global scale
}

TEST(CompressedTensorsConfig, Nvfp4OutsideItsSchemeIsRefusedNamingTheField) {
  struct Bad {
    std::string what;
    json group;
    std::string field;
  };
  const auto with = [](const char* part, const char* field, json value) {
    json g = nvfp4_group();
    g[part][field] = std::move(value);
    return g;
  };
  const Bad cases[] = {
      {"8-bit weights", with("weights", "num_bits", 8), "weights.num_bits"},
      {"int weights", with("weights", "type", "int"), "weights.type"},
      {"groups of 32 (MXFP4's)", with("weights", "group_size", 32), "weights.group_size"},
      {"a plain group strategy", with("weights", "strategy", "group"), "weights.strategy"},
      {"asymmetric weights", with("weights", "symmetric", false), "weights.symmetric"},
      {"activations without a stored global scale", with("input_activations", "dynamic", true),
       "input_activations.dynamic"},
      {"8-bit activations", with("input_activations", "num_bits", 8), "input_activations.num_bits"},
  };
  for (const Bad& bad : cases) {
    try {
      ModelConfig::from_json(config_with(nvfp4_config({{"group_0", bad.group}})));
      ADD_FAILURE() << bad.what << " must be refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << bad.what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("quantization_config.config_groups.group_0." + bad.field),
                std::string::npos)
          << bad.what << ": " << e.what();
    }
  }
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
  other_format["format"] = "marlin-24";
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
