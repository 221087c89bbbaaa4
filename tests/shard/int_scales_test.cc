// Integer and FP4 weights' scales (compressed-tensors pack-quantized in the model dtype, int-quantized in
// float32 on a rank, NVFP4's FP8 group scales and float32 global scales) are checked as FP8's are: a scale
// that is zero, negative or not finite is refused before any weight goes live, naming the checkpoint tensor
// and where in it (the group, the row, the expert), and nothing is exported.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <string>

#include "poke.h"
#include "shard_test_util.h"
#include "shardload/dtype.h"

namespace shardload::testing {
namespace {

TEST(IntScales, ABadScaleIsRefusedNamingTheTensorAndItsGroupRowOrExpert) {
  struct Bad {
    std::string arch, quant, tensor;
    uint64_t index;
    float value;
    std::string where;
  };
  const Bad cases[] = {
      // make-tiny's W4A16 o_proj [128, 128] in 32-value groups: value 5 is row 1, group 1.
      {"llama", "ct-w4a16", "model.layers.0.self_attn.o_proj.weight_scale", 5, 0.0f, "group (row 1, column 1)"},
      {"llama", "ct-w8a8", "model.layers.0.mlp.down_proj.weight_scale", 7, -2.0f, "row 7"},
      {"qwen3_moe", "ct-w4a16-asym", "model.layers.1.mlp.experts.3.up_proj.weight_scale", 0,
       std::numeric_limits<float>::quiet_NaN(), "expert 3"},
      {"deepseek_v3", "ct-w8a8", "model.layers.1.mlp.experts.2.down_proj.weight_scale", 0,
       std::numeric_limits<float>::infinity(), "expert 2"},
      // NVFP4's FP8 group scales, then a global scale (one value: no row or column to name).
      {"llama", "ct-nvfp4", "model.layers.0.self_attn.q_proj.weight_scale", 9, 0.0f, "group (row 1, column 1)"},
      {"qwen3_moe", "ct-nvfp4", "model.layers.1.mlp.experts.1.gate_proj.weight_global_scale", 0, -1.0f,
       "expert 1"},
      // ModelOpt's NVFP4: the same group scales, its weight_scale_2 a float32 scalar per projection.
      {"llama", "modelopt-nvfp4", "model.layers.0.self_attn.q_proj.weight_scale", 9, 0.0f, "group (row 1, column 1)"},
      {"qwen3_moe", "modelopt-nvfp4", "model.layers.1.mlp.experts.1.gate_proj.weight_scale_2", 0, -1.0f,
       "expert 1"},
      // Its experts' input scales: one row per logical expert on every rank.
      {"qwen3_moe", "modelopt-nvfp4", "model.layers.1.mlp.experts.5.up_proj.input_scale", 0, 0.0f, "expert 5"},
      // GPTQ's F16 scales [K / 32, N], input-major: value 5 of o_proj's [4, 128] is group 0 of column 5.
      {"llama", "gptq", "model.layers.0.self_attn.o_proj.scales", 5, 0.0f, "group (row 0, column 5)"},
      {"qwen3_moe", "gptq", "model.layers.1.mlp.experts.2.down_proj.scales", 0, -1.0f, "expert 2"},
      {"llama", "awq", "model.layers.0.mlp.gate_proj.scales", 3, std::numeric_limits<float>::infinity(),
       "group (row 0, column 3)"},
  };
  for (const Bad& bad : cases) {
    TempDir tmp;
    const std::string model = tmp.file("model");
    make_tiny({.arch = bad.arch, .out = model, .seed = test_seed(), .quant = bad.quant});
    // llm-compressor's scales: bf16, NVFP4's group scales FP8, its global scales (ModelOpt's weight_scale_2)
    // float32; GPTQ's and AWQ's F16.
    const bool nvfp4 = bad.quant == "ct-nvfp4" || bad.quant == "modelopt-nvfp4";
    const DType stored = bad.quant == "gptq" || bad.quant == "awq" ? DType::kF16
                         : !nvfp4                                  ? DType::kBF16
                         : bad.tensor.ends_with("weight_scale")   ? DType::kF8E4M3
                                                                   : DType::kF32;
    poke_value(model, bad.tensor, bad.index, bad.value, stored);
    const CommandResult result = shardload_cli({"export", model, "--tp", "2", "--out", tmp.file("export")});
    EXPECT_NE(result.exit_code, 0) << bad.tensor;
    EXPECT_NE(result.err.find(bad.tensor), std::string::npos) << result.err;
    EXPECT_NE(result.err.find(bad.where), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("positive and finite"), std::string::npos) << result.err;
    EXPECT_FALSE(std::filesystem::exists(tmp.file("export") + "/shardload.json")) << bad.tensor;
  }
}

}  // namespace
}  // namespace shardload::testing
