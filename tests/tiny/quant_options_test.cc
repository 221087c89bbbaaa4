// make_tiny's --quant / --activation-scheme options (library and command line), the block-aligned
// defaults of fp8-block, and the bf16 bytes that --quant must leave as they were.

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "run_command.h"
#include "shardload/error.h"
#include "shardload/safetensors.h"
#include "shardload/tiny.h"
#include "temp_dir.h"
#include "test_paths.h"
#include "tiny/tiny_model.h"
#include "tiny/tiny_quant.h"
#include "tiny_error.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

TEST(TinyQuantOptions, UnknownQuantListsTheAcceptedValues) {
  TempDir dir;
  const std::string out = (dir.path() / "m").string();
  for (const char* bad : {"int4", "FP8", "", "fp8_block"}) {
    const Error e = testing::make_tiny_error({.arch = "llama", .out = out, .quant = bad});
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << bad;
    EXPECT_EQ(e.field(), "quant");
    EXPECT_NE(e.expected().find("none, fp8, fp8-block"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(out)) << "nothing is written for a bad argument";
}

TEST(TinyQuantOptions, ActivationSchemeOnlyWithPerTensorFp8) {
  TempDir dir;
  const std::string out = (dir.path() / "m").string();
  for (const char* quant : {"none", "fp8-block"}) {
    for (const char* scheme : {"static", "dynamic"}) {
      const Error e = testing::make_tiny_error(
          {.arch = "qwen3", .out = out, .quant = quant, .activation_scheme = scheme});
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << quant << " " << scheme;
      EXPECT_EQ(e.field(), "activation-scheme");
    }
  }
  const Error e = testing::make_tiny_error(
      {.arch = "qwen3", .out = out, .quant = "fp8", .activation_scheme = "per-token"});
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(e.expected(), "static or dynamic");
  EXPECT_FALSE(fs::exists(out));

  make_tiny({.arch = "qwen3", .out = out, .quant = "fp8", .activation_scheme = "static"});
  const json config = json::parse(testing::read_file((fs::path(out) / "config.json").string()));
  EXPECT_EQ(config.at("quantization_config").at("activation_scheme"), "static");
}

TEST(TinyQuantOptions, SizeWorksWithFp8AndIsRefusedWithFp8Block) {
  TempDir dir;
  const Error e = testing::make_tiny_error(
      {.arch = "llama", .out = dir.file("b"), .size_bytes = 20'000'000, .quant = "fp8-block"});
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(e.field(), "size");
  EXPECT_FALSE(fs::exists(dir.file("b")));

  const uint64_t target = 20'000'000;
  const TinySummary summary =
      make_tiny({.arch = "qwen3_moe", .out = dir.file("s"), .size_bytes = target, .quant = "fp8"});
  EXPECT_NEAR(static_cast<double>(summary.bytes), static_cast<double>(target), 0.15 * target)
      << "the target counts the FP8 bytes";
  const json index = json::parse(testing::read_file(dir.file("s/model.safetensors.index.json")));
  const std::string shard =
      index.at("weight_map").at("model.layers.1.mlp.experts.0.up_proj.weight");
  const SafetensorsFile file = SafetensorsFile::open(dir.file("s/" + shard));
  EXPECT_EQ(file.header().find("model.layers.1.mlp.experts.0.up_proj.weight")->dtype,
            DType::kF8E4M3);
}

TEST(TinyQuantOptions, CommandLineTakesQuantAndActivationScheme) {
  TempDir dir;
  auto make = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {testing::shardload_bin(), "make-tiny",   "--arch",     "mixtral",
                                     "--out",       dir.file("m"), "--overwrite"};
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::run_command(args);
  };
  // Bad options are usage errors: exit status 2.
  testing::CommandResult r = make({"--quant", "int4"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("none, fp8, fp8-block"), std::string::npos) << r.err;
  r = make({"--activation-scheme", "dynamic"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("activation"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("m")));

  r = make({"--quant", "fp8", "--activation-scheme", "dynamic", "--seed", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json config = json::parse(testing::read_file(dir.file("m/config.json")));
  EXPECT_EQ(config.at("quantization_config").at("quant_method"), "fp8");
  EXPECT_EQ(config.at("quantization_config").at("activation_scheme"), "dynamic");
  EXPECT_FALSE(config.at("quantization_config").contains("weight_block_size"));
  r = make({"--quant", "fp8-block"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  config = json::parse(testing::read_file(dir.file("m/config.json")));
  EXPECT_EQ(config.at("quantization_config").at("weight_block_size"), json::array({128, 128}));
  r = make({"--quant", "none"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  config = json::parse(testing::read_file(dir.file("m/config.json")));
  EXPECT_FALSE(config.contains("quantization_config"));
}

// Every TP split of a block-FP8 projection must fall on a multiple of 128 (layout.md), for tp in
// {1, 2, 4} and every ep dividing it: the per-rank sizes restated from the layout contract.
TEST(TinyQuantOptions, BlockDefaultsSplitOnWholeBlocks) {
  for (const arch::Family* family : arch::families()) {
    if (!family->no_fp8_checkpoints.empty()) continue;  // make-tiny writes no FP8 checkpoint of it
    const tiny::TinyModel m = tiny::block_fp8_model(*family);
    SCOPED_TRACE(std::string(family->name));
    EXPECT_LE(tiny::total_bytes(m), 9u << 20);  // DeepSeek-V3.2: V3's 8.0 MiB and its indexers
    for (uint64_t t : {1, 2, 4}) {
      for (uint64_t ep : {1, 2, 4}) {
        if (t % ep != 0) continue;
        SCOPED_TRACE("tp " + std::to_string(t) + " ep " + std::to_string(ep));
        const uint64_t tm = t / ep;
        ASSERT_EQ(m.heads % t, 0u);
        const uint64_t heads = m.heads / t;
        if (m.kv_lora_rank == 0) {
          const uint64_t kv = t >= m.kv_heads ? 1 : m.kv_heads / t;
          EXPECT_TRUE(t < m.kv_heads || t % m.kv_heads == 0) << "kv heads replicate evenly";
          EXPECT_EQ(heads * m.head_dim % 128, 0u) << "q rows and o_proj columns";
          EXPECT_EQ(kv * m.head_dim % 128, 0u) << "k/v rows";
        } else {
          EXPECT_EQ(heads * (m.qk_nope_head_dim + m.qk_rope_head_dim) % 128, 0u) << "q rows";
          EXPECT_EQ(heads * (m.qk_nope_head_dim + m.v_head_dim) % 128, 0u) << "kv_b rows";
          EXPECT_EQ(heads * m.v_head_dim % 128, 0u) << "o_proj columns";
          EXPECT_EQ(m.q_lora_rank % 128, 0u) << "q_a comes first in fused_qkv_a";
        }
        if (m.linear_key_heads > 0) {  // Qwen3-Next: whole key-head groups and value heads per rank
          const uint64_t keys = m.linear_key_heads * m.linear_key_head_dim;
          const uint64_t values = m.linear_value_heads * m.linear_value_head_dim;
          EXPECT_EQ(m.linear_key_heads % t, 0u);
          EXPECT_EQ((2 * keys + 2 * values) / t % 128, 0u) << "in_proj_qkvz rows";
          EXPECT_EQ(values / t % 128, 0u) << "out_proj columns";
        }
        EXPECT_EQ(m.intermediate % (t * 128), 0u) << "dense MLP (Mixtral: experts)";
        EXPECT_EQ(m.shared_intermediate % (t * 128), 0u);
        EXPECT_EQ(m.shared_experts * m.moe_intermediate % (t * 128), 0u);
        if (m.experts > 0) {
          EXPECT_EQ(m.experts % ep, 0u);
          const uint64_t im = m.moe_intermediate > 0 ? m.moe_intermediate : m.intermediate;
          EXPECT_EQ(im % (tm * 128), 0u) << "expert intermediate";
        }
      }
    }
  }
  // DeepSeek's replicated kv_a_proj_with_mqa keeps a partial edge block, which is fine.
  const tiny::TinyModel ds = tiny::block_fp8_model(*arch::find_family("deepseek_v3"));
  EXPECT_NE((ds.kv_lora_rank + ds.qk_rope_head_dim) % 128, 0u);
}

// The families' generators say which matrices are projections (arch::TensorWriter::projection);
// restated here from the loader's side (layout.md "FP8"): every "*_proj" weight and Mixtral's expert
// w1/w2/w3 is FP8, never embeddings, heads, norms, routers, gates or biases. ERNIE's
// mtp_linear_proj.N, whose last name component is its index, has always stayed bf16.
bool restated_projection(const std::string& name) {
  if (!name.ends_with(".weight")) return false;
  const std::string module = name.substr(0, name.size() - std::string(".weight").size());
  const std::string last = module.substr(module.rfind('.') + 1);
  // DeepSeek-V3.2's indexer: wq_b and wk are FP8 on the Hub, weights_proj is BF16.
  if (module.ends_with("indexer.wq_b") || module.ends_with("indexer.wk")) return true;
  if (module.ends_with("indexer.weights_proj")) return false;
  // Qwen3-Next's b/a projection stays bf16, as in Qwen's FP8 checkpoints; so do Qwen3.5's, stored apart.
  if (module.ends_with("linear_attn.in_proj_ba") || module.ends_with("linear_attn.in_proj_b") ||
      module.ends_with("linear_attn.in_proj_a")) {
    return false;
  }
  // Gemma 4's per-layer-input projections stay in the model dtype, as its per_layer_input_gate
  // (docs/families/gemma4.md).
  if (last == "per_layer_model_projection" || last == "per_layer_projection") return false;
  if (last.find("_proj") != std::string::npos) return true;
  // DeepSeek-V4's own names: its attention projections and shared experts (its compressors stay bf16).
  if (module.find(".attn.") != std::string::npos && module.find("compressor") == std::string::npos &&
      (last == "wq_a" || last == "wq_b" || last == "wkv" || last == "wo_a" || last == "wo_b")) {
    return true;
  }
  if (module.find(".shared_experts.") != std::string::npos && (last == "w1" || last == "w2" || last == "w3")) {
    return true;
  }
  return (last == "w1" || last == "w2" || last == "w3") &&
         module.find(".experts.") != std::string::npos;
}

TEST(TinyQuantOptions, Fp8WeightsAreTheProjections) {
  std::set<std::string> fp8;
  std::set<std::string> kept;
  for (const arch::Family* family : arch::families()) {
    for (tiny::Quant quant : {tiny::Quant::kFp8, tiny::Quant::kFp8Block}) {
      tiny::TinyModel m = quant == tiny::Quant::kFp8Block ? tiny::block_fp8_model(*family)
                                                          : tiny::default_model(*family);
      m.quant = quant;
      for (const tiny::TensorSpec& spec : tiny::model_tensors(m)) {
        if (spec.kind != tiny::ValueKind::kWeight) continue;
        EXPECT_EQ(spec.dtype == DType::kF8E4M3, restated_projection(spec.name))
            << family->name << " " << spec.name;
        (spec.dtype == DType::kF8E4M3 ? fp8 : kept).insert(spec.name);
      }
    }
  }
  for (const char* name :
       {"model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.shared_expert.down_proj.weight",
        "model.layers.1.mlp.experts.7.up_proj.weight", "model.layers.1.self_attn.q_a_proj.weight",
        "model.layers.1.self_attn.kv_a_proj_with_mqa.weight",
        "model.layers.0.block_sparse_moe.experts.3.w2.weight", "model.layers.3.eh_proj.weight"}) {
    EXPECT_TRUE(fp8.contains(name)) << name;
  }
  for (const char* name :
       {"model.embed_tokens.weight", "lm_head.weight", "model.layers.1.mlp.gate.weight",
        "model.layers.0.block_sparse_moe.gate.weight",
        "model.layers.1.mlp.shared_expert_gate.weight", "model.layers.3.shared_head.head.weight",
        "model.mtp_linear_proj.0.weight"}) {
    EXPECT_TRUE(kept.contains(name)) << name;
  }
}

// FNV-1a over every tensor's name and data bytes, in name order.
uint64_t data_digest(const TempDir& dir) {
  const json index = json::parse(testing::read_file(dir.file("model.safetensors.index.json")));
  std::map<std::string, std::string> file_of;
  for (const auto& [name, file] : index.at("weight_map").items()) file_of[name] = file;
  uint64_t hash = 0xCBF29CE484222325ull;
  auto mix = [&](const void* data, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      hash ^= static_cast<const unsigned char*>(data)[i];
      hash *= 0x100000001B3ull;
    }
  };
  for (const auto& [name, file] : file_of) {
    const SafetensorsFile shard = SafetensorsFile::open(dir.file(file));
    const TensorInfo* info = shard.header().find(name);
    std::vector<std::byte> bytes(info->nbytes());
    shard.read(*info, bytes);
    mix(name.data(), name.size());
    mix(bytes.data(), bytes.size());
  }
  return hash;
}

// The tensor data of bf16 checkpoints, pinned from the generator as it was before --quant: other
// tests' fixtures rely on it, so a change here must be deliberate.
TEST(TinyQuantOptions, Bf16BytesAreUnchanged) {
  const std::map<std::string, uint64_t> pinned = {
      {"llama", 0xb44642be49561231ull},
      {"mixtral", 0x457d57a707229761ull},
      {"deepseek_v3", 0x77101d7b4e5586fdull},
  };
  for (const auto& [arch, digest] : pinned) {
    TempDir dir;
    make_tiny({.arch = arch, .out = dir.path().string(), .seed = 7});
    EXPECT_EQ(data_digest(dir), digest) << arch;
  }
}

}  // namespace
}  // namespace shardload
