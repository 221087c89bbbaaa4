// Exports of data-parallel layouts carry the fields docs/layout.md ("Data-parallel attention")
// names: each rank file dp_size, attn_tp_size and attn_tp_rank; shardload.json dp_size, dp_style and
// scopes. Loading an export checks them against the rank files and against the layout asked for; a
// plain export has none of them.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "error_kind.h"
#include "shardload/error.h"
#include "shardload/export.h"
#include "shardload/safetensors.h"
#include "shardload/tiny.h"
#include "shardload_bin.h"
#include "temp_dir.h"

namespace shardload {
namespace {

using ::shardload::testing::read_file;
using ::shardload::testing::run_shardload;
using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

using ::shardload::testing::kind_of;

// qwen3_moe at --tp 4 --dp 2 --ep 2 --enable-dp-lm-head: attention and lm_head over 2 ranks, the
// embedding replicated.
class DpExport : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = ::shardload::testing::make_tiny_model(dir_, "qwen3_moe", 5);
    const Checkpoint ckpt = Checkpoint::open(model_);
    ParallelConfig parallel;
    parallel.tp = 4;
    parallel.ep = 2;
    parallel.dp = 2;
    parallel.dp_lm_head = true;
    plan_ = make_plan(ckpt, parallel);
    ranks_ = load_ranks(ckpt, plan_);
    export_ranks(ckpt, plan_, ranks_, {.out = out_});
    manifest_ = nlohmann::json::parse(read_file(out_ + "/shardload.json"));
  }
  std::string file(int rank) const {
    return out_ + "/model-rank-" + std::to_string(rank) + "-part-0.safetensors";
  }
  void write_manifest(const nlohmann::json& manifest) { write_file(out_ + "/shardload.json", manifest.dump()); }

  TempDir dir_;
  std::string model_;
  std::string out_ = dir_.file("out");
  Plan plan_;
  std::vector<RankWeights> ranks_;
  nlohmann::json manifest_;
};

TEST_F(DpExport, ManifestAndRankFilesCarryTheDataParallelFields) {
  EXPECT_EQ(manifest_["dp_size"], 2);
  EXPECT_EQ(manifest_["dp_style"], "sglang");
  EXPECT_EQ(manifest_["scopes"], (nlohmann::json{{"attention", "attention"},
                                                 {"embedding", "replicated"},
                                                 {"lm_head", "attention"},
                                                 {"dense_mlp", "world"},
                                                 {"shared_experts", "world"}}));
  for (int r = 0; r < 4; ++r) {
    const SafetensorsFile f = SafetensorsFile::open(file(r));
    const auto& metadata = f.header().metadata;
    EXPECT_EQ(metadata.at("dp_size"), "2");
    EXPECT_EQ(metadata.at("attn_tp_size"), "2");
    EXPECT_EQ(metadata.at("attn_tp_rank"), std::to_string(r % 2));
    EXPECT_EQ(metadata.at("ep_rank"), std::to_string(r / 2));
  }
  // Loaded back, every rank is the bytes that were exported.
  const LoadedExport loaded = load_export(out_, {}, 0, {.tp = 4, .ep = 2, .dp = 2, .dp_lm_head = true});
  ASSERT_EQ(loaded.ranks.size(), 4u);
  for (const LoadedExport::Rank& rank : loaded.ranks) {
    for (const LoadedExport::Tensor& t : rank.tensors) {
      for (const PlanParam& p : plan_.ranks[static_cast<size_t>(rank.rank)].params) {
        if (p.name != t.name) continue;
        EXPECT_EQ(t.shape, p.shape) << t.name;
        EXPECT_EQ(std::memcmp(rank.buffer.data() + t.offset,
                              ranks_[static_cast<size_t>(rank.rank)].buffer.data() + p.offset, p.nbytes),
                  0)
            << t.name;
      }
    }
  }
}

TEST_F(DpExport, APlainExportHasNoDataParallelFields) {
  TempDir other;
  const Checkpoint ckpt = Checkpoint::open(model_);
  ParallelConfig parallel;
  parallel.tp = 4;
  parallel.ep = 2;
  const Plan plan = make_plan(ckpt, parallel);
  const std::vector<RankWeights> ranks = load_ranks(ckpt, plan);
  export_ranks(ckpt, plan, ranks, {.out = other.file("out")});
  const nlohmann::json manifest = nlohmann::json::parse(read_file(other.file("out/shardload.json")));
  for (const char* field : {"dp_size", "dp_style", "scopes"}) EXPECT_FALSE(manifest.contains(field)) << field;
  const SafetensorsFile f = SafetensorsFile::open(other.file("out/model-rank-1-part-0.safetensors"));
  EXPECT_FALSE(f.header().metadata.contains("dp_size"));
  // Asking a plain export for a DP layout is a conflict naming the field.
  std::string message;
  EXPECT_EQ(kind_of([&] { load_export(other.file("out"), {}, 0, {.dp = 2}); }, &message),
            ErrorKind::kInvalidArgument);
  EXPECT_NE(message.find("dp_size"), std::string::npos) << message;
}

TEST_F(DpExport, TheLayoutAskedForMustMatch) {
  std::string message;
  EXPECT_EQ(kind_of([&] { load_export(out_, {}, 0, {.dp = 4}); }, &message), ErrorKind::kInvalidArgument);
  EXPECT_NE(message.find("dp_size"), std::string::npos) << message;
  EXPECT_EQ(kind_of([&] { load_export(out_, {}, 0, {.dp_lm_head = false}); }, &message),
            ErrorKind::kInvalidArgument);
  EXPECT_NE(message.find("scopes"), std::string::npos) << message;
  EXPECT_NE(message.find("\"lm_head\":\"attention\""), std::string::npos) << message;
  EXPECT_EQ(kind_of([&] { load_export(out_, {}, 0, {.dp_style = DpStyle::kVllm}); }),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { load_export(out_, {}, 0, {.replicate_dense_mlp = true}); }),
            ErrorKind::kInvalidArgument);
  // From the command line: the flags given are checked, the others taken from the export.
  const auto load = [&](std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"load", out_});
    return run_shardload(flags);
  };
  EXPECT_EQ(load({"--dp", "2", "--enable-dp-lm-head"}).exit_code, 0);
  EXPECT_EQ(load({"--dp", "2"}).exit_code, 0);
  EXPECT_EQ(load({}).exit_code, 0);
  const auto refused = load({"--dp-style", "vllm"});  // a vLLM replica holds its embedding over 2 ranks
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("scopes"), std::string::npos) << refused.err;
}

TEST_F(DpExport, ATamperedManifestIsRefused) {
  std::string message;
  nlohmann::json manifest = manifest_;
  manifest.erase("dp_size");  // rank files of a DP layout under a plain manifest
  write_manifest(manifest);
  EXPECT_EQ(kind_of([&] { load_export(out_); }, &message), ErrorKind::kInvalidMetadata);
  EXPECT_NE(message.find("dp_size"), std::string::npos) << message;

  manifest = manifest_;
  manifest["dp_size"] = 3;
  write_manifest(manifest);
  EXPECT_EQ(kind_of([&] { load_export(out_); }, &message), ErrorKind::kConfig);
  EXPECT_NE(message.find("a divisor of tp_size 4"), std::string::npos) << message;

  manifest = manifest_;
  manifest["dp_size"] = 4;  // divides 4, but the rank files say 2
  write_manifest(manifest);
  EXPECT_EQ(kind_of([&] { load_export(out_); }, &message), ErrorKind::kInvalidMetadata);

  manifest = manifest_;
  manifest["scopes"]["attention"] = "everywhere";
  write_manifest(manifest);
  EXPECT_EQ(kind_of([&] { load_export(out_); }, &message), ErrorKind::kConfig);
  EXPECT_NE(message.find("scopes.attention"), std::string::npos) << message;

  manifest = manifest_;
  manifest["dp_style"] = nlohmann::json::array();
  write_manifest(manifest);
  EXPECT_EQ(kind_of([&] { load_export(out_); }), ErrorKind::kConfig);
}

}  // namespace
}  // namespace shardload
