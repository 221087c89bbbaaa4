#include "shardload/export.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>

#include "shardload/error.h"
#include "shardload/tiny.h"
#include "shardload_bin.h"
#include "temp_dir.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using ::shardload::testing::read_file;
using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

struct Exported {
  Plan plan;
  std::vector<RankWeights> ranks;
};

Exported export_model(const std::string& model, const ParallelConfig& parallel,
                      const ExportOptions& options) {
  const Checkpoint ckpt = Checkpoint::open(model);
  Exported out{make_plan(ckpt, parallel), {}};
  out.ranks = load_ranks(ckpt, out.plan);
  export_ranks(ckpt, out.plan, out.ranks, options);
  return out;
}

std::string make_model(const TempDir& dir, const std::string& arch) {
  return ::shardload::testing::make_tiny_model(dir, arch, TinyOptions{}.seed);
}

TEST(ExportTest, LoadingAnExportGivesBackTheSameRankBytes) {
  TempDir dir;
  const std::string model = make_model(dir, "deepseek_v3");
  ParallelConfig parallel;
  parallel.tp = 4;
  parallel.ep = 2;
  const Exported exported = export_model(model, parallel, {.out = dir.file("out")});
  ASSERT_TRUE(is_export_dir(dir.file("out")));
  EXPECT_FALSE(is_export_dir(model));
  const LoadedExport loaded = load_export(dir.file("out"));
  ASSERT_EQ(loaded.ranks.size(), 4u);
  for (const LoadedExport::Rank& rank : loaded.ranks) {
    const RankPlan& plan = exported.plan.ranks[static_cast<size_t>(rank.rank)];
    ASSERT_EQ(rank.tensors.size(), plan.params.size());
    for (const PlanParam& param : plan.params) {
      const auto it = std::find_if(rank.tensors.begin(), rank.tensors.end(),
                                   [&](const LoadedExport::Tensor& t) { return t.name == param.name; });
      ASSERT_NE(it, rank.tensors.end()) << param.name;
      EXPECT_EQ(it->shape, param.shape) << param.name;
      EXPECT_EQ(it->dtype, param.dtype) << param.name;
      EXPECT_EQ(std::memcmp(rank.buffer.data() + it->offset,
                            exported.ranks[static_cast<size_t>(rank.rank)].buffer.data() + param.offset,
                            param.nbytes),
                0)
          << param.name;
    }
  }
  EXPECT_EQ(loaded.manifest->at("tp_size"), 4);
  EXPECT_EQ(loaded.manifest->at("moe_tp_size"), 2);
  EXPECT_EQ(loaded.manifest->at("quantization"), "none");
  EXPECT_EQ(loaded.manifest->at("postprocessed"), true);
  EXPECT_EQ(loaded.manifest->at("physical_to_logical_map").size(),
            static_cast<size_t>(exported.plan.model.moe_layer_count()));
  // config.json and the tokenizer travel with the export; the index and the shards do not.
  EXPECT_TRUE(fs::exists(dir.file("out/config.json")));
  EXPECT_TRUE(fs::exists(dir.file("out/tokenizer.json")));
  EXPECT_FALSE(fs::exists(dir.file("out/model.safetensors.index.json")));
}

TEST(ExportTest, SplitsPartsAtTheMaximumFileSize) {
  TempDir dir;
  const std::string model = make_model(dir, "llama");
  const Exported exported = export_model(model, {}, {.out = dir.file("out"), .max_file_size = 64 << 10});
  const LoadedExport loaded = load_export(dir.file("out"));
  const nlohmann::json files = loaded.manifest->at("ranks").at(0).at("files");
  ASSERT_GT(files.size(), 1u);
  for (size_t k = 0; k < files.size(); ++k) {
    EXPECT_EQ(files[k], "model-rank-0-part-" + std::to_string(k) + ".safetensors");
    const SafetensorsFile file = SafetensorsFile::open(dir.file("out/" + files[k].get<std::string>()));
    // Over the limit only when a single tensor is larger than it.
    if (file.header().tensors.size() > 1) {
      EXPECT_LE(file.header().data_bytes(), uint64_t{64} << 10);
    }
    EXPECT_EQ(file.header().metadata.at("format"), "shardload/1");
    EXPECT_EQ(file.header().metadata.at("rank"), "0");
    EXPECT_EQ(file.header().metadata.at("architecture"), "LlamaForCausalLM");
  }
}

TEST(ExportTest, RefusesANonEmptyDirectoryUnlessOverwrite) {
  TempDir dir;
  const std::string model = make_model(dir, "llama");
  fs::create_directories(dir.file("out"));
  write_file(dir.file("out/keep.txt"), "mine");
  EXPECT_THROW(export_model(model, {}, {.out = dir.file("out")}), Error);
  ParallelConfig tp2;
  tp2.tp = 2;
  export_model(model, tp2, {.out = dir.file("out"), .overwrite = true});
  ASSERT_TRUE(fs::exists(dir.file("out/model-rank-1-part-0.safetensors")));
  // A second export over the first removes the old rank files, and nothing else.
  export_model(model, {}, {.out = dir.file("out"), .overwrite = true});
  EXPECT_FALSE(fs::exists(dir.file("out/model-rank-1-part-0.safetensors")));
  EXPECT_EQ(read_file(dir.file("out/keep.txt")), "mine");
}

}  // namespace
}  // namespace shardload
