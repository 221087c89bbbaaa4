#include "shardload/loader.h"

#include <gtest/gtest.h>

#include <cstring>

#include "shardload/error.h"
#include "shardload/tiny.h"
#include "temp_dir.h"

namespace shardload {
namespace {

using ::shardload::testing::TempDir;

std::string tiny_model(const TempDir& dir, const std::string& arch) {
  TinyOptions options;
  options.arch = arch;
  options.out = dir.file(arch);
  options.seed = 3;
  make_tiny(options);
  return options.out;
}

// Loading all ranks at once (shared gathers across ranks) and each rank alone give the same bytes, with
// every thread count: the scheduling of work items never changes the result.
TEST(LoaderTest, AllRanksAtOnceEqualsEachRankAlone) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(tiny_model(dir, "qwen2_moe"));
  ParallelConfig parallel;
  parallel.tp = 4;
  parallel.ep = 2;
  parallel.dtype = DType::kF16;  // exercises converted gathers too
  const Plan plan = make_plan(ckpt, parallel);
  LoadOptions all;
  all.threads = 3;
  const std::vector<RankWeights> together = load_ranks(ckpt, plan, all);
  ASSERT_EQ(together.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    LoadOptions one;
    one.ranks = {r};
    one.threads = 1;
    const std::vector<RankWeights> alone = load_ranks(ckpt, plan, one);
    ASSERT_EQ(alone.size(), 1u);
    ASSERT_EQ(alone[0].buffer.size(), together[r].buffer.size());
    EXPECT_EQ(std::memcmp(alone[0].buffer.data(), together[r].buffer.data(), alone[0].buffer.size()), 0)
        << "rank " << r;
  }
}

TEST(LoaderTest, TensorParallelOneIsTheCheckpointItself) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(tiny_model(dir, "llama"));
  const Plan plan = make_plan(ckpt, ParallelConfig{});
  LoadStats stats;
  const std::vector<RankWeights> ranks = load_ranks(ckpt, plan, {}, &stats);
  ASSERT_EQ(ranks.size(), 1u);
  const RankPlan& rank = plan.ranks[0];
  for (const PlanParam& param : rank.params) {
    if (param.name != "model.layers.0.self_attn.o_proj.weight") continue;
    const Checkpoint::Entry& entry = ckpt.at(param.name);
    std::vector<std::byte> expected(entry.info->nbytes());
    ckpt.files()[entry.file].read(*entry.info, expected);
    const TensorView view = param_view(ranks[0], param);
    ASSERT_EQ(view.data.size(), expected.size());
    EXPECT_EQ(std::memcmp(view.data.data(), expected.data(), expected.size()), 0);
    EXPECT_EQ(view.shape, entry.info->shape);
  }
  EXPECT_GT(stats.bytes_read, 0u);
  EXPECT_EQ(stats.bytes_written, ranks[0].buffer.size());
}

TEST(LoaderTest, RejectsARankOutsideTheLayout) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(tiny_model(dir, "llama"));
  ParallelConfig parallel;
  parallel.tp = 2;
  const Plan plan = make_plan(ckpt, parallel);
  LoadOptions options;
  options.ranks = {2};
  EXPECT_THROW(load_ranks(ckpt, plan, options), Error);
}

TEST(LoaderTest, ReportsATruncatedFileAsAnIoErrorNamingTheTensor) {
  TempDir dir;
  const std::string model = tiny_model(dir, "llama");
  const Checkpoint ckpt = Checkpoint::open(model);
  const Plan plan = make_plan(ckpt, ParallelConfig{});
  // The header was validated at open; the file shrinks afterwards (changed under the reader).
  const std::string& victim = ckpt.files().back().path();
  ASSERT_EQ(truncate(victim.c_str(), static_cast<off_t>(ckpt.files().back().file_size() / 2)), 0);
  try {
    load_ranks(ckpt, plan);
    FAIL() << "a truncated file loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_EQ(e.file(), victim);
    EXPECT_FALSE(e.tensor().empty());
  }
}

TEST(ChecksumTest, IsXxh3SixtyFourInHex) {
  // XXH3-64 of the empty input, the library's published value.
  EXPECT_EQ(xxh3_hex({}), "2d06800538d394c2");
  const std::string text = "shardload";
  EXPECT_EQ(xxh3_hex(std::as_bytes(std::span(text))).size(), 16u);
  EXPECT_NE(xxh3_hex(std::as_bytes(std::span(text))), xxh3_hex({}));
}

}  // namespace
}  // namespace shardload
