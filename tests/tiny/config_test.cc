// make-tiny --config FILE --sparse: the checkpoint of a config.json, as holes. On configs the
// generator wrote itself (every family, bf16 and both FP8 formats), the sparse checkpoint has
// exactly the tensors of the generated one; configs it cannot reproduce, and --config with a sizing
// option or without --sparse, are refused before anything is written. The real configs of
// tests/data/configs are in real_configs_test.cc.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shardload/error.h"
#include "shardload/safetensors.h"
#include "shardload/tiny.h"
#include "shardload_bin.h"
#include "temp_dir.h"
#include "tiny_error.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

// Every tensor of a checkpoint directory (through its index): name -> dtype and shape.
std::map<std::string, std::pair<DType, Shape>> headers(const fs::path& dir) {
  const json index =
      json::parse(testing::read_file((dir / "model.safetensors.index.json").string()));
  std::map<std::string, std::pair<DType, Shape>> out;
  std::map<std::string, SafetensorsFile> files;
  for (const auto& [name, file] : index.at("weight_map").items()) {
    auto it = files.find(file);
    if (it == files.end()) {
      it = files.emplace(file, SafetensorsFile::open((dir / file.get<std::string>()).string()))
               .first;
    }
    const TensorInfo* info = it->second.header().find(name);
    if (info == nullptr) {
      ADD_FAILURE() << name << " is not in " << file;
      continue;
    }
    out.emplace(name, std::pair{info->dtype, info->shape});
  }
  return out;
}

// A config.json the generator wrote for `arch`, changed by `edit`, at DIR/config.json.
std::string edited_config(const TempDir& dir, const std::string& arch, const std::string& quant,
                          void (*edit)(json&)) {
  const std::string model = dir.file("source");
  make_tiny({.arch = arch, .out = model, .quant = quant});
  json config = json::parse(testing::read_file(model + "/config.json"));
  edit(config);
  const std::string path = dir.file("config.json");
  testing::write_file(path, config.dump(2));
  return path;
}

TEST(TinyConfig, SparseCheckpointOfAGeneratedConfigHasTheSameTensors) {
  for (const std::string& arch : tiny_architectures()) {
    for (const char* quant : {"none", "fp8", "fp8-block"}) {
      if (std::string_view(quant) != "none" && !tiny_writes_fp8(arch)) continue;
      TempDir dir;
      const std::string source = dir.file("source");
      const std::string sparse = dir.file("sparse");
      make_tiny({.arch = arch, .out = source, .seed = 5, .quant = quant});
      const TinySummary summary =
          make_tiny({.out = sparse, .config = source + "/config.json", .sparse = true});
      EXPECT_EQ(headers(sparse), headers(source)) << arch << " " << quant;
      EXPECT_EQ(testing::read_file(sparse + "/config.json"),
                testing::read_file(source + "/config.json"))
          << "the config is copied byte for byte";
      EXPECT_EQ(summary.tensors, headers(source).size());
      EXPECT_FALSE(fs::exists(sparse + "/tokenizer.json")) << "a real config's token ids differ";
    }
  }
}

TEST(TinyConfig, SparseDataAreHolesThatReadAsZeros) {
  TempDir dir;
  const std::string source = dir.file("source");
  make_tiny({.arch = "qwen3_moe", .out = source, .size_bytes = 64 << 20});
  const std::string sparse = dir.file("sparse");
  const TinySummary summary =
      make_tiny({.out = sparse, .config = source + "/config.json", .sparse = true});
  ASSERT_GT(summary.bytes, uint64_t{60} << 20);
  uint64_t apparent = 0;
  uint64_t allocated = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(sparse)) {
    if (entry.path().extension() != ".safetensors") continue;
    struct stat st {};
    ASSERT_EQ(::stat(entry.path().c_str(), &st), 0);
    apparent += static_cast<uint64_t>(st.st_size);
    allocated += static_cast<uint64_t>(st.st_blocks) * 512;
    const SafetensorsFile file = SafetensorsFile::open(entry.path().string());
    EXPECT_EQ(file.file_size(), file.header().data_start + file.header().data_bytes());
    const TensorInfo& first = file.header().tensors.front();
    std::vector<std::byte> bytes(first.nbytes(), std::byte{1});
    file.read(first, bytes);
    EXPECT_TRUE(
        std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; }));
  }
  EXPECT_GT(apparent, summary.bytes);
  EXPECT_LT(allocated, apparent / 100) << "the data take no blocks";
}

TEST(TinyConfig, SparseWithoutConfigWritesTheTinyModelAsHoles) {
  TempDir dir;
  const std::string source = dir.file("source");
  const std::string sparse = dir.file("sparse");
  make_tiny({.arch = "deepseek_v3", .out = source});
  make_tiny({.arch = "deepseek_v3", .out = sparse, .sparse = true});
  EXPECT_EQ(headers(sparse), headers(source));
}

TEST(TinyConfig, ConfigWithASizingOptionOrWithoutSparseIsAnInvalidArgument) {
  TempDir dir;
  const std::string config = edited_config(dir, "llama", "none", [](json&) {});
  const std::string out = dir.file("m");
  const std::vector<std::pair<TinyOptions, std::string>> cases = {
      {{.arch = "llama", .out = out, .config = config, .sparse = true}, "arch"},
      {{.out = out, .layers = 2, .config = config, .sparse = true}, "layers"},
      {{.out = out, .experts = 4, .config = config, .sparse = true}, "experts"},
      {{.out = out, .size_bytes = 1000, .config = config, .sparse = true}, "size"},
      {{.out = out, .quant = "fp8", .config = config, .sparse = true}, "quant"},
      {{.out = out, .activation_scheme = "static", .config = config, .sparse = true},
       "activation-scheme"},
      {{.out = out, .config = config}, "sparse"},
      {{.config = config, .sparse = true}, "out"},
  };
  for (const auto& [options, field] : cases) {
    const Error e = testing::make_tiny_error(options);
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << field;
    EXPECT_EQ(e.field(), field) << e.what();
  }
  EXPECT_FALSE(fs::exists(out)) << "nothing is written for a bad argument";
}

TEST(TinyConfig, ConfigsTheGeneratorCannotWriteAreConfigErrors) {
  struct Case {
    const char* arch;
    const char* quant;
    void (*edit)(json&);
    const char* field;
  };
  const Case cases[] = {
      {"llama", "none", [](json& c) { c["attention_bias"] = true; }, "attention_bias"},
      {"llama", "none", [](json& c) { c["mlp_bias"] = true; }, "mlp_bias"},
      {"llama", "none", [](json& c) { c["torch_dtype"] = "float16"; }, "torch_dtype"},
      {"deepseek_v3", "fp8-block",
       [](json& c) {
         c["quantization_config"]["weight_block_size"] = {64, 64};
       },
       "quantization_config.weight_block_size"},
      {"llama", "none", [](json& c) { c["architectures"] = {"GPT2LMHeadModel"}; }, "architectures"},
      {"llama", "none", [](json& c) { c["num_hidden_layers"] = 100000; }, "num_hidden_layers"},
      // The planner reads GLM's moe_layer_freq (layers 1 and 3 of 4 dense), its generator writes
      // every layer from first_k_dense_replace on as MoE.
      {"glm4_moe", "none",
       [](json& c) {
         c["num_hidden_layers"] = 4;
         c["moe_layer_freq"] = 2;
       },
       "MoE layers"},
  };
  for (const Case& k : cases) {
    TempDir dir;
    const std::string config = edited_config(dir, k.arch, k.quant, k.edit);
    const std::string out = dir.file("m");
    const Error e = testing::make_tiny_error({.out = out, .config = config, .sparse = true});
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_EQ(e.field(), k.field) << e.what();
    EXPECT_EQ(e.file(), config) << e.what();
    EXPECT_FALSE(fs::exists(out));
  }
}

TEST(TinyConfig, MoeLayerPatternsOfTheFamilyRuleAreKept) {
  TempDir dir;
  // Qwen3-MoE with a dense layer list and a step: layers 1, 3 and 5 are MoE but 3 is listed dense.
  const std::string config = edited_config(dir, "qwen3_moe", "none", [](json& c) {
    c["num_hidden_layers"] = 6;
    c["decoder_sparse_step"] = 2;
    c["mlp_only_layers"] = {3};
  });
  make_tiny({.out = dir.file("m"), .config = config, .sparse = true});
  const auto tensors = headers(dir.file("m"));
  for (int layer = 0; layer < 6; ++layer) {
    const bool moe =
        tensors.count("model.layers." + std::to_string(layer) + ".mlp.gate.weight") > 0;
    EXPECT_EQ(moe, layer == 1 || layer == 5) << layer;
  }
}

TEST(TinyConfig, CommandLineRefusesConflictingOptions) {
  TempDir dir;
  const std::string config = edited_config(dir, "qwen3", "none", [](json&) {});
  const std::string out = dir.file("m");
  const std::vector<std::vector<std::string>> bad = {
      {"--config", config, "--sparse", "--arch", "qwen3"},
      {"--config", config, "--sparse", "--layers", "2"},
      {"--config", config, "--sparse", "--experts", "2"},
      {"--config", config, "--sparse", "--size", "1000"},
      {"--config", config, "--sparse", "--quant", "none"},
      {"--config", config, "--sparse", "--activation-scheme", "static"},
      {"--config", config},
      {"--sparse"},
  };
  for (std::vector<std::string> args : bad) {
    args.insert(args.begin(), {"make-tiny", "--out", out});
    const testing::CommandResult r = testing::run_shardload(args);
    EXPECT_EQ(r.exit_code, 2) << args[3] << " " << args.back() << ": " << r.err;
  }
  EXPECT_FALSE(fs::exists(out));
  testing::write_file(dir.file("bad.json"), std::string_view("{\"architectures\": [1"));
  const testing::CommandResult not_json = testing::run_shardload(
      {"make-tiny", "--out", out, "--config", dir.file("bad.json"), "--sparse"});
  EXPECT_EQ(not_json.exit_code, 1) << not_json.err;
  const testing::CommandResult ok =
      testing::run_shardload({"make-tiny", "--out", out, "--config", config, "--sparse"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

}  // namespace
}  // namespace shardload
