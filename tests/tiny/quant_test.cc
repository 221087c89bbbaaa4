// make_tiny --quant fp8 / fp8-block: which tensors are FP8, their scale tensors, and that the codes
// dequantize to the values of the bf16 checkpoint; the FP8 rules are restated here from layout.md
// and fp8.md, independently of the generator.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "run_command.h"
#include "shardload/convert.h"
#include "shardload/safetensors.h"
#include "shardload/tiny.h"
#include "temp_dir.h"
#include "test_paths.h"
#include "tiny/tiny_model.h"
#include "tiny/tiny_values.h"

namespace shardload {
namespace {

using nlohmann::json;

// A generated checkpoint: config, every tensor header (found through the index) and its file.
struct Fixture {
  testing::TempDir dir;
  json config;
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> file_of;

  std::vector<std::byte> bytes(const std::string& name) const {
    SafetensorsFile file = SafetensorsFile::open(dir.file(file_of.at(name)));
    std::vector<std::byte> out(tensors.at(name).nbytes());
    file.read(*file.header().find(name), out);
    return out;
  }
  std::vector<float> floats(const std::string& name) const {
    const std::vector<std::byte> raw = bytes(name);
    const DType dtype = tensors.at(name).dtype;
    std::vector<float> out(raw.size() / (dtype_bits(dtype) / 8));
    convert(dtype, raw.data(), DType::kF32, out.data(), out.size());
    return out;
  }
  float scalar(const std::string& name) const { return floats(name).at(0); }
  bool has(const std::string& name) const { return tensors.count(name) > 0; }
};

std::unique_ptr<Fixture> make(const std::string& arch, const std::string& quant, uint64_t seed,
                              const std::string& scheme = "") {
  auto f = std::make_unique<Fixture>();
  make_tiny({.arch = arch,
             .out = f->dir.path().string(),
             .seed = seed,
             .quant = quant,
             .activation_scheme = scheme});
  f->config = json::parse(testing::read_file(f->dir.file("config.json")));
  const json index = json::parse(testing::read_file(f->dir.file("model.safetensors.index.json")));
  std::map<std::string, SafetensorsFile> files;
  for (const auto& [name, file] : index.at("weight_map").items()) {
    const std::string shard = file.get<std::string>();
    auto it = files.find(shard);
    if (it == files.end())
      it = files.emplace(shard, SafetensorsFile::open(f->dir.file(shard))).first;
    const TensorInfo* info = it->second.header().find(name);
    if (info == nullptr) {
      ADD_FAILURE() << name << " is not in " << shard;
      continue;
    }
    f->tensors.emplace(name, *info);
    f->file_of.emplace(name, shard);
  }
  return f;
}

// Fixtures are generated once per (arch, quant, seed, scheme) and shared by the tests.
const Fixture& cached(const std::string& arch, const std::string& quant, uint64_t seed = 7,
                      const std::string& scheme = "") {
  static std::map<std::tuple<std::string, std::string, uint64_t, std::string>,
                  std::unique_ptr<Fixture>>
      cache;
  auto& slot = cache[{arch, quant, seed, scheme}];
  if (!slot) slot = make(arch, quant, seed, scheme);
  return *slot;
}

// layout.md: the weight of every linear projection is FP8; Mixtral's experts call theirs w1/w2/w3.
bool is_projection(const std::string& name) {
  if (!name.ends_with(".weight")) return false;
  const std::string module = name.substr(0, name.size() - 7);
  const std::string last = module.substr(module.rfind('.') + 1);
  if (last.find("_proj") != std::string::npos) return true;
  return name.find("block_sparse_moe.experts.") != std::string::npos &&
         (last == "w1" || last == "w2" || last == "w3");
}

bool is_scale(const std::string& name) {
  return name.ends_with(".weight_scale") || name.ends_with(".weight_scale_inv") ||
         name.ends_with(".input_scale");
}

std::string module_of(const std::string& weight) { return weight.substr(0, weight.size() - 7); }

uint64_t blocks(uint64_t n) { return (n + 127) / 128; }

// The bf16 values the generator gives a tensor of this name and shape: those of --quant none.
std::vector<float> bf16_values(const std::string& name, const Shape& shape, uint64_t seed) {
  const tiny::TensorSpec spec{name, DType::kBF16, shape, tiny::ValueKind::kWeight};
  std::vector<std::byte> raw(shape_numel(shape) * 2);
  const tiny::FillJob job{&spec, raw};
  tiny::fill_values({&job, 1}, seed, 1);
  std::vector<float> out(shape_numel(shape));
  convert(DType::kBF16, raw.data(), DType::kF32, out.data(), out.size());
  return out;
}

struct Case {
  std::string arch;
  std::string quant;
  std::string scheme;  // fp8 only; "" is static
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.arch + "_" + info.param.quant + "_" + info.param.scheme;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class Quantized : public ::testing::TestWithParam<Case> {
 protected:
  const Fixture& fixture(uint64_t seed = 7) const {
    return cached(GetParam().arch, GetParam().quant, seed, GetParam().scheme);
  }
  bool block() const { return GetParam().quant == "fp8-block"; }
  bool input_scales() const { return GetParam().quant == "fp8" && GetParam().scheme != "dynamic"; }
  // The scale tensor of a projection weight (a multiplier in both formats).
  std::string scale_of(const std::string& weight) const {
    return module_of(weight) + (block() ? ".weight_scale_inv" : ".weight_scale");
  }
};

TEST_P(Quantized, ConfigHasTheQuantizationConfig) {
  const json& q = fixture().config.at("quantization_config");
  EXPECT_EQ(q.at("quant_method"), "fp8");
  if (block()) {
    EXPECT_EQ(q.at("activation_scheme"), "dynamic");
    EXPECT_EQ(q.at("fmt"), "e4m3");
    EXPECT_EQ(q.at("weight_block_size"), json::array({128, 128}));
  } else {
    EXPECT_EQ(q.at("activation_scheme"), input_scales() ? "static" : "dynamic");
    EXPECT_FALSE(q.contains("weight_block_size"));
  }
  EXPECT_EQ(fixture().config.at("torch_dtype"), "bfloat16") << "the model dtype stays bf16";
}

TEST_P(Quantized, ProjectionsAreFp8WithScalesAndTheRestKeepsItsDtype) {
  const Fixture& f = fixture();
  size_t fp8 = 0;
  for (const auto& [name, info] : f.tensors) {
    if (is_projection(name)) {
      ++fp8;
      EXPECT_EQ(info.dtype, DType::kF8E4M3) << name;
      ASSERT_EQ(info.shape.size(), 2u) << name;
      const std::string m = module_of(name);
      ASSERT_TRUE(f.has(scale_of(name))) << name;
      const TensorInfo& scale = f.tensors.at(scale_of(name));
      EXPECT_EQ(scale.dtype, DType::kF32) << name;
      const Shape expected =
          block() ? Shape{blocks(info.shape[0]), blocks(info.shape[1])} : Shape{};
      EXPECT_EQ(scale.shape, expected) << name;
      EXPECT_FALSE(f.has(m + (block() ? ".weight_scale" : ".weight_scale_inv"))) << name;
      EXPECT_EQ(f.has(m + ".input_scale"), input_scales()) << name;
      if (input_scales()) {
        EXPECT_EQ(f.tensors.at(m + ".input_scale").dtype, DType::kF32) << name;
        EXPECT_EQ(f.tensors.at(m + ".input_scale").shape, Shape{}) << name;
      }
    } else if (is_scale(name)) {
      const std::string base = name.substr(0, name.rfind('.'));
      EXPECT_TRUE(f.has(base + ".weight") && is_projection(base + ".weight")) << "stray " << name;
    } else {
      // Embeddings, lm_head, norms, routers, shared_expert_gate, biases: as in --quant none.
      const bool f32 = name.find("e_score_correction_bias") != std::string::npos;
      EXPECT_EQ(info.dtype, f32 ? DType::kF32 : DType::kBF16) << name;
    }
  }
  EXPECT_GT(fp8, 10u);
  for (const char* never :
       {"model.embed_tokens.weight", "model.norm.weight", "model.layers.1.mlp.gate.weight",
        "model.layers.0.block_sparse_moe.gate.weight"}) {
    if (f.has(never)) {
      EXPECT_EQ(f.tensors.at(never).dtype, DType::kBF16) << never;
    }
  }
}

// The routers and the LM head stay bf16, and the config says so as Qwen3's FP8 checkpoints do
// (modules_to_not_convert): an engine not told so builds them as FP8 linears over bf16 bytes.
TEST_P(Quantized, ConfigListsEveryLinearItLeftUnquantized) {
  const Fixture& f = fixture();
  std::set<std::string> expected;
  for (const auto& [name, info] : f.tensors) {
    if (info.shape.size() == 2 && info.dtype != DType::kF8E4M3 && name.ends_with(".weight") &&
        name.find("embed_tokens") == std::string::npos) {
      expected.insert(name.substr(0, name.size() - 7));
    }
  }
  EXPECT_TRUE(expected.count("lm_head") || f.config.at("tie_word_embeddings") == true);
  const json& q = f.config.at("quantization_config");
  ASSERT_TRUE(q.contains("modules_to_not_convert")) << q.dump();
  const auto listed = q.at("modules_to_not_convert").get<std::set<std::string>>();
  EXPECT_EQ(listed, expected);
  for (const std::string& m : listed) {
    EXPECT_TRUE(m == "lm_head" || m.ends_with(".gate") || m.ends_with("shared_expert_gate") ||
                m.ends_with("shared_head.head"))
        << m;
  }
  if (f.config.contains("num_experts") || f.config.contains("n_routed_experts") ||
      f.config.contains("num_local_experts")) {
    EXPECT_TRUE(std::any_of(listed.begin(), listed.end(), [](const std::string& m) {
      return m.ends_with(".gate");
    })) << "a MoE lists its routers";
  }
}

TEST_P(Quantized, CodesDequantizeToTheBf16Values) {
  const Fixture& f = fixture();
  for (const auto& [name, info] : f.tensors) {
    if (!is_projection(name)) continue;
    SCOPED_TRACE(name);
    const std::vector<float> w = bf16_values(name, info.shape, 7);
    const std::vector<std::byte> codes = f.bytes(name);
    const std::vector<float> scales = f.floats(scale_of(name));
    const uint64_t rows = info.shape[0], cols = info.shape[1];
    const uint64_t br = block() ? 128 : rows, bc = block() ? 128 : cols;
    const uint64_t grid_cols = (cols + bc - 1) / bc;
    std::vector<float> amax(scales.size(), 0.0f);
    for (uint64_t i = 0; i < rows * cols; ++i) {
      float& a = amax[(i / cols / br) * grid_cols + (i % cols) / bc];
      a = std::max(a, std::fabs(w[i]));
    }
    // s = amax / 448 * f with f in [1, 4): no code saturates, and the range is not wasted.
    for (size_t b = 0; b < scales.size(); ++b) {
      ASSERT_GE(scales[b], amax[b] / 448.0f * 0.9999f) << "block " << b;
      ASSERT_LT(scales[b], amax[b] / 448.0f * 4.0001f) << "block " << b;
    }
    for (uint64_t i = 0; i < rows * cols; ++i) {
      const size_t b = (i / cols / br) * grid_cols + (i % cols) / bc;
      const auto q = static_cast<uint8_t>(codes[i]);
      ASSERT_EQ(q, f32_to_fp8e4m3(w[i] / scales[b])) << "element " << i;
      ASSERT_LE(std::fabs(fp8e4m3_to_f32(q) * scales[b] - w[i]), amax[b] / 8) << "element " << i;
    }
  }
}

TEST_P(Quantized, FusedPartsHaveDifferentScales) {
  const Fixture& f = fixture();
  const std::string attn = "model.layers.0.self_attn.";
  std::vector<std::vector<std::string>> fused;
  if (f.has(attn + "q_proj.weight") && f.has(attn + "k_proj.weight")) {
    fused.push_back({attn + "q_proj.weight", attn + "k_proj.weight", attn + "v_proj.weight"});
  }
  if (f.has(attn + "q_a_proj.weight")) {
    fused.push_back({attn + "q_a_proj.weight", attn + "kv_a_proj_with_mqa.weight"});
  }
  for (const char* prefix :
       {"model.layers.0.block_sparse_moe.experts.0.", "model.layers.1.mlp.experts.0."}) {
    const std::string expert = prefix;
    if (f.has(expert + "w1.weight")) fused.push_back({expert + "w1.weight", expert + "w3.weight"});
    if (f.has(expert + "gate_proj.weight")) {
      fused.push_back({expert + "gate_proj.weight", expert + "up_proj.weight"});
    }
  }
  ASSERT_GE(fused.size(), 2u);
  for (const std::vector<std::string>& parts : fused) {
    std::vector<float> first;  // the first block's scale of each part
    for (const std::string& part : parts) first.push_back(f.floats(scale_of(part)).at(0));
    const auto [lo, hi] = std::minmax_element(first.begin(), first.end());
    EXPECT_GT(*hi, *lo * 1.05f) << parts[0] << ": requantizing to the largest must matter";
    std::sort(first.begin(), first.end());
    EXPECT_EQ(std::adjacent_find(first.begin(), first.end()), first.end()) << parts[0];
    if (!input_scales()) continue;
    std::vector<float> inputs;
    for (const std::string& part : parts) {
      inputs.push_back(f.scalar(module_of(part) + ".input_scale"));
      EXPECT_GE(inputs.back(), 0.01f) << part;
      EXPECT_LT(inputs.back(), 0.1f) << part;
    }
    std::sort(inputs.begin(), inputs.end());
    EXPECT_EQ(std::adjacent_find(inputs.begin(), inputs.end()), inputs.end()) << parts[0];
  }
  if (block()) {
    // Blocks of one weight have scales of their own too.
    const std::vector<float> s = f.floats(scale_of(fused[0][0]));
    ASSERT_GE(s.size(), 2u);
    EXPECT_NE(s[0], s[1]);
  }
}

TEST_P(Quantized, SameSeedSameBytesOtherSeedOtherBytes) {
  const std::unique_ptr<Fixture> again =
      make(GetParam().arch, GetParam().quant, 7, GetParam().scheme);
  const Fixture& other = fixture(8);
  const Fixture& f = fixture();
  std::map<std::string, bool> shards;
  for (const auto& [name, shard] : f.file_of) shards[shard] = true;
  for (const auto& [shard, unused] : shards) {
    const std::string bytes = testing::read_file(f.dir.file(shard));
    EXPECT_EQ(bytes, testing::read_file(again->dir.file(shard))) << shard;
    EXPECT_NE(bytes, testing::read_file(other.dir.file(shard))) << shard;
  }
  EXPECT_EQ(testing::read_file(f.dir.file("config.json")),
            testing::read_file(again->dir.file("config.json")));
}

TEST_P(Quantized, OpensWithTheCheckpointReader) {
  const Fixture& f = fixture();
  const testing::CommandResult r =
      testing::run_command({testing::shardload_bin(), "inspect", f.dir.path().string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json out = json::parse(r.out);
  EXPECT_EQ(out.at("warnings"), json::array());
  EXPECT_EQ(out.at("total_tensors").get<size_t>(), f.tensors.size());
  EXPECT_TRUE(out.at("dtypes").contains("F8_E4M3"));
}

INSTANTIATE_TEST_SUITE_P(
    Tiny, Quantized,
    ::testing::Values(Case{"qwen3_moe", "fp8", ""}, Case{"deepseek_v3", "fp8", ""},
                      Case{"mixtral", "fp8", ""}, Case{"qwen3_moe", "fp8", "dynamic"},
                      Case{"qwen3_moe", "fp8-block", ""}, Case{"deepseek_v3", "fp8-block", ""},
                      Case{"mixtral", "fp8-block", ""}),
    case_name);

// Per-tensor FP8 keeps the bf16 sizes: the same tensors as --quant none plus the scales, and the
// values it quantizes are those of the bf16 checkpoint of the same seed.
TEST(TinyQuant, PerTensorFp8IsTheBf16CheckpointQuantized) {
  for (const char* arch : {"qwen3_moe", "deepseek_v3", "mixtral"}) {
    SCOPED_TRACE(arch);
    const Fixture& bf16 = cached(arch, "none");
    const Fixture& fp8 = cached(arch, "fp8");
    EXPECT_FALSE(bf16.config.contains("quantization_config"));
    json config = fp8.config;
    config.erase("quantization_config");
    EXPECT_EQ(config, bf16.config);
    size_t seen = 0;
    for (const auto& [name, info] : fp8.tensors) {
      if (is_scale(name)) continue;
      ASSERT_TRUE(bf16.has(name)) << name;
      EXPECT_EQ(info.shape, bf16.tensors.at(name).shape) << name;
      if (is_projection(name)) {
        EXPECT_EQ(bf16_values(name, info.shape, 7), bf16.floats(name)) << name;
      } else {
        EXPECT_EQ(fp8.bytes(name), bf16.bytes(name)) << name;
      }
      ++seen;
    }
    EXPECT_EQ(seen, bf16.tensors.size());
  }
}

}  // namespace
}  // namespace shardload
