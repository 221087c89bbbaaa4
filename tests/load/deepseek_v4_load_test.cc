// DeepSeek-V4's loaded ranks (deepseek_v4): make-tiny's Hub-format checkpoint (block FP8 with ue8m0
// X.scale grids, MXFP4 routed experts, the int32 hash-routing table) loaded at tp 2 x ep 2: the kept
// bytes (E8M0 scales, FP4 codes, tid2eid) are the checkpoint's, never cast.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardload/checkpoint.h"
#include "shardload/loader.h"
#include "shardload/plan.h"
#include "shardload/safetensors.h"
#include "shardload/tiny.h"
#include "temp_dir.h"

namespace shardload {
// Named: the unity build puts this file beside the other tests of its folder.
namespace deepseek_v4_load_test {
namespace {

TEST(DeepseekV4Load, RanksHoldTheStoredBytes) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("v4");
  make_tiny({.arch = "deepseek_v4", .out = dir, .seed = 5, .quant = "mxfp4"});
  const Checkpoint ckpt = Checkpoint::open(dir);
  ParallelConfig p;
  p.tp = 2;
  p.ep = 2;
  const Plan plan = make_plan(ckpt, p);
  // Rank 1 holds experts 4..7 and the second half of the heads: its bytes are the checkpoint's.
  LoadOptions options;
  options.ranks = {1};
  const std::vector<RankWeights> loaded = load_ranks(ckpt, plan, options);
  const RankWeights& w = loaded.at(0);
  const auto bytes_of = [&](const std::string& name) {
    for (const PlanParam& param : plan.ranks[1].params) {
      if (param.name == name) return std::string(reinterpret_cast<const char*>(w.buffer.data()) + param.offset, param.nbytes);
    }
    ADD_FAILURE() << name;
    return std::string();
  };
  const auto stored = [&](const std::string& name) {
    const auto* entry = ckpt.find(name);
    const std::string file = testing::read_file(ckpt.files()[entry->file].path());
    const size_t start = ckpt.files()[entry->file].header().data_start + entry->info->begin;
    return file.substr(start, entry->info->end - entry->info->begin);
  };
  const std::string scales = bytes_of("model.layers.1.ffn.experts.w13_weight_scale");
  const std::string s4 = stored("layers.1.ffn.experts.4.w1.scale") + stored("layers.1.ffn.experts.4.w3.scale");
  EXPECT_EQ(scales.substr(0, s4.size()), s4);
  const std::string codes = bytes_of("model.layers.1.ffn.experts.w2_weight");
  const std::string c4 = stored("layers.1.ffn.experts.4.w2.weight");
  EXPECT_EQ(codes.substr(0, c4.size()), c4);
  EXPECT_EQ(bytes_of("model.layers.0.ffn.gate.tid2eid"), stored("layers.0.ffn.gate.tid2eid"));
  const std::string grid = stored("layers.1.attn.wq_b.scale");  // [heads * d / 128, 1]: second half
  EXPECT_EQ(bytes_of("model.layers.1.attn.wq_b.weight_scale_inv"), grid.substr(grid.size() / 2));
}

}  // namespace
}  // namespace deepseek_v4_load_test
}  // namespace shardload
