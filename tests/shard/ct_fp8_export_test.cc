// compressed-tensors FP8 (llm-compressor) exports against docs/layout.md "compressed-tensors FP8", per
// weight strategy x activation scheme x family group (dense, MoE, MLA): every exported FP8 tensor,
// dequantized with the scales exported beside it, equals the checkpoint's own dequantized values
// placed by the unquantized layout (the export of a float32 checkpoint holding exactly those values,
// written here): channel and block bit for bit, tensor within one FP8 code (fused parts requantized to
// the largest scale). Names, shapes and dtypes are the spec's; a bad scale is refused naming the
// tensor and its row or block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "export_reader.h"
#include "fp8_reference.h"
#include "poke.h"
#include "shard_test_util.h"
#include "shardload/checkpoint.h"
#include "shardload/convert.h"
#include "shardload/safetensors.h"

namespace shardload::testing {
namespace {

using nlohmann::json;

struct CtFp8Case {
  std::string arch;
  std::string quant;   // ct-fp8-tensor, ct-fp8-channel, ct-fp8-block
  std::string scheme;  // activation scheme for ct-fp8-tensor ("" otherwise)
  int tp;
  int ep;
};

void PrintTo(const CtFp8Case& c, std::ostream* os) {
  *os << c.arch << " " << c.quant << " " << c.scheme << " tp " << c.tp << " ep " << c.ep;
}

std::string ct_fp8_case_name(const ::testing::TestParamInfo<CtFp8Case>& info) {
  const CtFp8Case& c = info.param;
  std::string quant = c.quant.substr(7);  // tensor, channel, block
  return fmt::format("{}_{}{}_tp{}_ep{}", c.arch, quant, c.scheme.empty() ? "" : "_" + c.scheme, c.tp, c.ep);
}

std::vector<float> to_floats(DType dtype, const std::vector<std::byte>& bytes) {
  std::vector<float> out(bytes.size() / (dtype_bits(dtype) / 8));
  convert(dtype, bytes.data(), DType::kF32, out.data(), out.size());
  return out;
}

// The checkpoint with every FP8 weight dequantized (code x its scale, in float32; exact: a 4-bit by
// 8-bit mantissa product) and its scales dropped; config.json without quantization_config.
void write_dequantized(const std::string& ct_dir, const std::string& out_dir) {
  const Checkpoint ckpt = Checkpoint::open(ct_dir);
  std::vector<std::vector<std::byte>> storage;
  std::vector<TensorToWrite> tensors;
  auto read = [&](const std::string& name, TensorInfo& info) {
    const Checkpoint::Entry* entry = ckpt.find(name);
    info = *entry->info;
    std::vector<std::byte> bytes(info.nbytes());
    ckpt.files()[entry->file].read(info, bytes);
    return bytes;
  };
  storage.reserve(ckpt.tensor_names().size());
  for (const std::string& name : ckpt.tensor_names()) {
    if (name.ends_with(".weight_scale") || name.ends_with(".input_scale")) continue;
    TensorInfo info;
    std::vector<std::byte> bytes = read(name, info);
    if (info.dtype != DType::kF8E4M3) {
      storage.push_back(std::move(bytes));
      tensors.push_back({name, info.dtype, info.shape, storage.back()});
      continue;
    }
    TensorInfo scale_info;
    const std::vector<float> scale =
        to_floats(DType::kBF16, read(name.substr(0, name.size() - 6) + "weight_scale", scale_info));
    ASSERT_EQ(scale_info.dtype, DType::kBF16) << name << ": llm-compressor stores scales in the model dtype";
    const uint64_t rows = info.shape[0], cols = info.shape[1];
    const uint64_t grid_cols = scale_info.shape.size() == 2 ? scale_info.shape[1] : 1;
    // [1]: one scale; [rows, 1]: per row; else 128 x 128 blocks.
    const bool per_row = scale_info.shape.size() == 2 && scale_info.shape[0] == rows && grid_cols == 1;
    std::vector<float> values(rows * cols);
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t c = 0; c < cols; ++c) {
        const float s = scale.size() == 1 ? scale[0] : per_row ? scale[r] : scale[(r / 128) * grid_cols + c / 128];
        values[r * cols + c] = static_cast<float>(fp8_value(uint8_t(bytes[r * cols + c]))) * s;
      }
    }
    std::vector<std::byte>& out = storage.emplace_back(values.size() * 4);
    std::memcpy(out.data(), values.data(), out.size());
    tensors.push_back({name, DType::kF32, info.shape, storage.back()});
  }
  std::filesystem::create_directories(out_dir);
  write_safetensors(out_dir + "/model.safetensors", tensors, {{"format", "pt"}});
  json config = json::parse(std::ifstream(ct_dir + "/config.json"));
  config.erase("quantization_config");
  std::ofstream(out_dir + "/config.json") << config.dump(2);
}

// One FP8 code step at magnitude a (e4m3: 3 mantissa bits; subnormals 2^-9 apart).
double code_step(double a) { return a < std::ldexp(1.0, -6) ? std::ldexp(1.0, -9) : std::ldexp(1.0, int(std::floor(std::log2(a))) - 3); }

class CtFp8Export : public ::testing::TestWithParam<CtFp8Case> {};

TEST_P(CtFp8Export, DequantizesToTheCheckpointsValuesInTheSpecsLayout) {
  const CtFp8Case& c = GetParam();
  TempDir tmp;
  const std::string model = tmp.file("model");
  make_tiny({.arch = c.arch, .out = model, .seed = test_seed(), .quant = c.quant, .activation_scheme = c.scheme});
  const std::string reference = tmp.file("dequantized");
  write_dequantized(model, reference);
  if (HasFatalFailure()) return;
  const std::vector<std::string> layout = {"--tp", std::to_string(c.tp), "--ep", std::to_string(c.ep)};
  std::vector<std::string> args = {"export", model, "--out", tmp.file("export")};
  args.insert(args.end(), layout.begin(), layout.end());
  CommandResult result = shardload_cli(args);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  args = {"export", reference, "--dtype", "fp32", "--out", tmp.file("reference-export")};
  args.insert(args.end(), layout.begin(), layout.end());
  result = shardload_cli(args);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  Problems problems;
  const ExportContents got = read_export(tmp.file("export"), problems);
  const ExportContents want = read_export(tmp.file("reference-export"), problems);
  ASSERT_TRUE(problems.empty()) << problems.text();

  const std::string strategy = c.quant.substr(7);
  const bool static_inputs = strategy == "tensor" && c.scheme != "dynamic";
  EXPECT_EQ(got.manifest.value("quantization", ""), "compressed-tensors");
  EXPECT_EQ(got.manifest.value("weight_strategy", ""), strategy);
  EXPECT_EQ(got.manifest.value("activation_scheme", ""), static_inputs ? "static" : "dynamic");

  size_t fp8_tensors = 0;
  for (int r = 0; r < c.tp; ++r) {
    const auto& rank = got.ranks[size_t(r)];
    for (const auto& [name, ref] : want.ranks[size_t(r)]) {
      ASSERT_TRUE(rank.count(name)) << "rank " << r << " lacks " << name;
      const HostTensor& t = rank.at(name);
      ASSERT_EQ(t.shape, ref.shape) << "rank " << r << " " << name;
      const std::vector<float> expected = to_floats(ref.dtype, ref.bytes);
      if (t.dtype != DType::kF8E4M3) {
        EXPECT_EQ(to_floats(t.dtype, t.bytes), expected) << "rank " << r << " " << name;
        continue;
      }
      ++fp8_tensors;
      const std::string base = name.substr(0, name.size() - 6);  // "...weight" -> "..."
      ASSERT_TRUE(rank.count(base + "weight_scale")) << name;
      EXPECT_FALSE(rank.count(base + "weight_scale_inv")) << name;
      EXPECT_EQ(rank.count(base + "input_scale") > 0, static_inputs) << name;
      const HostTensor& scale_tensor = rank.at(base + "weight_scale");
      EXPECT_EQ(scale_tensor.dtype, DType::kF32) << name;
      const std::vector<float> scale = to_floats(DType::kF32, scale_tensor.bytes);
      const bool expert = t.shape.size() == 3;
      const uint64_t slots = expert ? t.shape[0] : 1;
      const uint64_t rows = t.shape[expert ? 1 : 0], cols = t.shape[expert ? 2 : 1];
      // The spec's scale shapes.
      Shape scale_shape;
      if (strategy == "channel") {
        scale_shape = {rows, 1};
      } else if (strategy == "block") {
        scale_shape = {(rows + 127) / 128, (cols + 127) / 128};
      } else if (expert) {
        scale_shape = name.ends_with("w13_weight") ? Shape{2} : Shape{};
      } else {
        scale_shape = {1};
      }
      if (expert) scale_shape.insert(scale_shape.begin(), slots);
      ASSERT_EQ(scale_tensor.shape, scale_shape) << "rank " << r << " " << name;
      const uint64_t per_slot = scale.size() / slots;
      for (uint64_t s = 0; s < slots; ++s) {
        const float* slot_scale = scale.data() + s * per_slot;
        if (strategy == "tensor" && per_slot == 2) {
          EXPECT_EQ(slot_scale[0], slot_scale[1]) << name << " slot " << s << ": both halves at max(gate, up)";
        }
        for (uint64_t i = 0; i < rows; ++i) {
          for (uint64_t j = 0; j < cols; ++j) {
            const uint64_t at = (s * rows + i) * cols + j;
            const float sc = strategy == "channel" ? slot_scale[i]
                             : strategy == "block" ? slot_scale[(i / 128) * ((cols + 127) / 128) + j / 128]
                                                   : slot_scale[0];
            const double code_value = fp8_value(uint8_t(t.bytes[at]));
            if (strategy == "tensor") {
              // Requantized to the merged scale: within one code of the value it stands for.
              const double x = double(expected[at]) / sc;
              ASSERT_LE(std::fabs(code_value - x), code_step(std::max(std::fabs(x), std::fabs(code_value))) * 1.000001)
                  << "rank " << r << " " << name << " element " << at;
            } else {
              ASSERT_EQ(static_cast<float>(code_value) * sc, expected[at])
                  << "rank " << r << " " << name << " element " << at;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(fp8_tensors, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, CtFp8Export,
    ::testing::Values(CtFp8Case{"llama", "ct-fp8-tensor", "static", 2, 1},
                      CtFp8Case{"llama", "ct-fp8-tensor", "dynamic", 4, 1},
                      CtFp8Case{"llama", "ct-fp8-channel", "", 2, 1},
                      CtFp8Case{"llama", "ct-fp8-block", "", 4, 1},
                      CtFp8Case{"qwen3_moe", "ct-fp8-tensor", "static", 4, 2},
                      CtFp8Case{"qwen3_moe", "ct-fp8-tensor", "dynamic", 2, 2},
                      CtFp8Case{"qwen3_moe", "ct-fp8-channel", "", 4, 2},
                      CtFp8Case{"qwen3_moe", "ct-fp8-block", "", 4, 2},
                      CtFp8Case{"deepseek_v3", "ct-fp8-tensor", "static", 4, 2},
                      CtFp8Case{"deepseek_v3", "ct-fp8-tensor", "dynamic", 2, 1},
                      CtFp8Case{"deepseek_v3", "ct-fp8-channel", "", 4, 2},
                      CtFp8Case{"deepseek_v3", "ct-fp8-block", "", 2, 2}),
    ct_fp8_case_name);

// A scale that is zero, negative or not finite is refused before any weight goes live, naming the
// checkpoint tensor and where in it: the row (channel), the block (block), the expert.
TEST(CtFp8Scales, ABadScaleIsRefusedNamingTheTensorAndItsRowOrBlock) {
  struct Bad {
    std::string arch, quant, tensor;
    uint64_t index;
    float value;
    std::string where;
  };
  const Bad cases[] = {
      {"llama", "ct-fp8-channel", "model.layers.0.self_attn.k_proj.weight_scale", 5, 0.0f, "row 5"},
      {"deepseek_v3", "ct-fp8-block", "model.layers.1.self_attn.o_proj.weight_scale", 1, -1.0f,
       "block (row 0, column 1)"},
      {"qwen3_moe", "ct-fp8-tensor", "model.layers.1.mlp.experts.3.down_proj.weight_scale", 0,
       std::numeric_limits<float>::infinity(), "expert 3"},
  };
  for (const Bad& bad : cases) {
    TempDir tmp;
    const std::string model = tmp.file("model");
    make_tiny({.arch = bad.arch, .out = model, .seed = test_seed(), .quant = bad.quant});
    poke_value(model, bad.tensor, bad.index, bad.value, DType::kBF16);  // llm-compressor: bf16 scales
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
