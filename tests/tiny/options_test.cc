// make_tiny's options: --size, bad arguments, and what it does to an existing output directory.

#include <filesystem>
#include <string>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "shardload/error.h"
#include "shardload/tiny.h"
#include "temp_dir.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

ErrorKind kind_of(const TinyOptions& options) {
  try {
    make_tiny(options);
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "make_tiny did not throw";
  return ErrorKind::kIo;
}

uint64_t index_total(const TempDir& dir) {
  const json index = json::parse(testing::read_file(dir.file("model.safetensors.index.json")));
  return index.at("metadata").at("total_size").get<uint64_t>();
}

TEST(TinyOptions, SizeGrowsTheModelToAboutTheTarget) {
  for (const char* arch : {"llama", "qwen3_moe", "deepseek_v3"}) {
    TempDir dir;
    const uint64_t target = 40'000'000;
    const TinySummary summary =
        make_tiny({.arch = arch, .out = dir.path().string(), .size_bytes = target});
    EXPECT_NEAR(static_cast<double>(summary.bytes), static_cast<double>(target), 0.15 * target)
        << arch;
    EXPECT_EQ(index_total(dir), summary.bytes);
    const json config = json::parse(testing::read_file(dir.file("config.json")));
    EXPECT_GT(config.at("hidden_size").get<uint64_t>(), 128u) << arch;
    EXPECT_EQ(config.at("intermediate_size").get<uint64_t>() % 8, 0u) << arch;
  }
}

TEST(TinyOptions, UnknownArchitectureIsAnInvalidArgument) {
  TempDir dir;
  EXPECT_EQ(kind_of({.arch = "gpt2", .out = dir.path().string()}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of({.arch = "", .out = dir.path().string()}), ErrorKind::kInvalidArgument);
  EXPECT_TRUE(fs::is_empty(dir.path())) << "nothing is written for a bad argument";
}

TEST(TinyOptions, BadCountsAreInvalidArguments) {
  TempDir dir;
  const std::string out = (dir.path() / "m").string();
  EXPECT_EQ(kind_of({.arch = "llama", .out = out, .layers = 0}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of({.arch = "llama", .out = out, .layers = -2}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of({.arch = "mixtral", .out = out, .experts = 0}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of({.arch = "qwen3", .out = ""}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of({.arch = "qwen3", .out = out, .size_bytes = uint64_t{1} << 50}),
            ErrorKind::kInvalidArgument);
  EXPECT_FALSE(fs::exists(out));
}

// A dense family has no experts to count: an expert count is refused, not dropped, and nothing is
// written.
TEST(TinyOptions, ExpertsForADenseFamilyAreAnInvalidArgument) {
  TempDir dir;
  const std::string out = (dir.path() / "m").string();
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    EXPECT_EQ(kind_of({.arch = arch, .out = out, .experts = 8}), ErrorKind::kInvalidArgument)
        << arch;
  }
  EXPECT_FALSE(fs::exists(out));
}

// --every-layer-moe: no dense layer in the config or the tensors (real Qwen3-MoE checkpoints;
// SGLang's Qwen3-MoE holds none); a dense family is refused and nothing is written.
TEST(TinyOptions, EveryLayerMoeLeavesNoDenseLayer) {
  for (const auto& [arch, field, none] :
       {std::tuple{"qwen3_moe", "mlp_only_layers", json::array()},
        std::tuple{"deepseek_v3", "first_k_dense_replace", json(0)}}) {
    TempDir dir;
    make_tiny({.arch = arch, .out = dir.path().string(), .every_layer_moe = true});
    const json config = json::parse(testing::read_file(dir.file("config.json")));
    EXPECT_EQ(config.at(field), none) << arch;
    const json index = json::parse(testing::read_file(dir.file("model.safetensors.index.json")));
    bool layer0_experts = false;
    for (const auto& [name, file] : index.at("weight_map").items()) {
      layer0_experts |= name.starts_with("model.layers.0.mlp.experts.");
    }
    EXPECT_TRUE(layer0_experts) << arch;
  }
  TempDir dir;
  const std::string out = (dir.path() / "m").string();
  EXPECT_EQ(kind_of({.arch = "llama", .out = out, .every_layer_moe = true}), ErrorKind::kInvalidArgument);
  EXPECT_FALSE(fs::exists(out));
}

TEST(TinyOptions, CreatesMissingDirectories) {
  TempDir dir;
  const fs::path out = dir.path() / "a" / "b";
  const TinySummary summary = make_tiny({.arch = "qwen2", .out = out.string()});
  EXPECT_EQ(summary.dir, out.string());
  EXPECT_TRUE(fs::is_regular_file(out / "config.json"));
}

TEST(TinyOptions, RefusesANonEmptyDirectoryWithoutOverwrite) {
  TempDir dir;
  testing::write_file(dir.file("notes.txt"), "keep me");
  EXPECT_EQ(kind_of({.arch = "llama", .out = dir.path().string()}), ErrorKind::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir.path() / "config.json"));
}

TEST(TinyOptions, RefusesAFileAsTheOutputDirectory) {
  TempDir dir;
  testing::write_file(dir.file("file"), "x");
  EXPECT_EQ(kind_of({.arch = "llama", .out = dir.file("file"), .overwrite = true}),
            ErrorKind::kInvalidArgument);
}

TEST(TinyOptions, OverwriteReplacesShardsIndexAndConfigOnly) {
  TempDir dir;
  make_tiny({.arch = "qwen3_moe", .out = dir.path().string(), .size_bytes = 20'000'000});
  // A shard name the next run does not write must not survive beside the new shards.
  testing::write_file(dir.file("model-00009-of-00009.safetensors"), "stale");
  testing::write_file(dir.file("notes.txt"), "keep me");
  const TinySummary summary =
      make_tiny({.arch = "llama", .out = dir.path().string(), .seed = 2, .overwrite = true});
  size_t shards = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir.path())) {
    shards += entry.path().extension() == ".safetensors";
  }
  EXPECT_EQ(shards, summary.shards);
  EXPECT_FALSE(fs::exists(dir.path() / "model-00009-of-00009.safetensors"));
  EXPECT_EQ(testing::read_file(dir.file("notes.txt")), "keep me");
  const json config = json::parse(testing::read_file(dir.file("config.json")));
  EXPECT_EQ(config.at("model_type"), "llama");
  EXPECT_EQ(index_total(dir), summary.bytes);
}

TEST(TinyOptions, OverwriteOfAnEmptyOrMissingDirectoryJustWrites) {
  TempDir dir;
  EXPECT_NO_THROW(make_tiny({.arch = "mixtral", .out = dir.path().string(), .overwrite = true}));
  EXPECT_NO_THROW(make_tiny({.arch = "mixtral", .out = dir.file("new"), .overwrite = true}));
}

}  // namespace
}  // namespace shardload
