// config.json sizes are bounded: a value no model has (a head count of 2^59 + 8) would otherwise
// reach the planner, whose products of sizes must not wrap around.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "shardload/error.h"
#include "shardload/model.h"

namespace shardload {
namespace {

nlohmann::json llama_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", 64},
          {"vocab_size", 128},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"intermediate_size", 96}};
}

Error config_error(const nlohmann::json& config) {
  try {
    ModelConfig::from_json(config);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "accepted " << config.dump();
  return Error(ErrorKind::kIo, "none");
}

TEST(ConfigLimits, RealSizesAreAccepted) {
  nlohmann::json config = llama_config();
  EXPECT_EQ(ModelConfig::from_json(config).heads, 4u);
  config["vocab_size"] = 262144;  // Gemma 3
  config["hidden_size"] = 16384;  // Llama 3.1 405B
  config["intermediate_size"] = 53248;
  config["num_attention_heads"] = 128;
  EXPECT_EQ(ModelConfig::from_json(config).vocab, 262144u);
}

TEST(ConfigLimits, SizesNoModelHasAreRefusedByName) {
  for (const char* field : {"num_attention_heads", "num_key_value_heads", "hidden_size",
                            "vocab_size", "intermediate_size", "num_hidden_layers", "head_dim"}) {
    nlohmann::json config = llama_config();
    config[field] = (uint64_t{1} << 59) + 8;
    const Error e = config_error(config);
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_EQ(e.field(), field);
    EXPECT_EQ(e.message(), "size out of range") << e.what();
    EXPECT_EQ(e.found(), std::to_string((uint64_t{1} << 59) + 8));
  }
  nlohmann::json config = llama_config();
  config["num_attention_heads"] = 65537;
  EXPECT_EQ(config_error(config).expected(), "at most 65536");
}

TEST(ConfigLimits, ExpertCountsAndBlocksAreBounded) {
  nlohmann::json config = llama_config();
  config["architectures"] = {"Qwen3MoeForCausalLM"};
  config["num_experts"] = uint64_t{1} << 40;
  config["moe_intermediate_size"] = 32;
  EXPECT_EQ(config_error(config).field(), "num_experts");
  config["num_experts"] = 8;
  config["quantization_config"] = {{"quant_method", "fp8"},
                                   {"weight_block_size", {uint64_t{1} << 62, 128}}};
  EXPECT_EQ(config_error(config).field(), "quantization_config.weight_block_size");
}

// DeepSeek-V3 spells the FP8 format "e4m3", MiniMax-M2 "float8_e4m3fn" (torch's name); both are e4m3. Any
// other format is refused by name rather than read as e4m3.
TEST(ConfigLimits, Fp8FormatIsE4m3UnderEitherSpelling) {
  nlohmann::json config = llama_config();
  for (const char* fmt : {"e4m3", "float8_e4m3fn"}) {
    config["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", fmt}, {"weight_block_size", {128, 128}}};
    EXPECT_EQ(ModelConfig::from_json(config).quantization, Quantization::kFp8Block) << fmt;
  }
  for (const char* fmt : {"e5m2", "float8_e5m2", "float8_e4m3fnuz"}) {
    config["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", fmt}};
    const Error e = config_error(config);
    EXPECT_EQ(e.field(), "quantization_config.fmt") << fmt;
    EXPECT_EQ(e.found(), std::string("\"") + fmt + "\"") << e.what();
  }
}

TEST(ConfigLimits, NegativeAndFractionalSizesAreNotSizes) {
  for (const nlohmann::json& bad : {nlohmann::json(-4), nlohmann::json(4.5), nlohmann::json("4")}) {
    nlohmann::json config = llama_config();
    config["num_attention_heads"] = bad;
    EXPECT_EQ(config_error(config).message(), "not a non-negative integer") << bad.dump();
  }
}

}  // namespace
}  // namespace shardload
