// Hot reload and rebalancing on data-parallel attention layouts (layout.md "Data-parallel attention"):
// unchanged code paths, in place, equal to a fresh load; experts still move by EP rank while the
// attention, replicated and world-scoped tensors stay where they are.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "reload_fixture.h"
#include "shardload/reload.h"

namespace shardload {
namespace {

using testing::addresses;
using testing::make_model;
using testing::TempDir;

// Every rank of `live` holds the bytes of a fresh load of `model` under `parallel` and `map`.
void expect_equals_fresh_load(const LiveModel& live, const std::string& model, ParallelConfig parallel,
                              const std::vector<std::vector<int>>& map = {}) {
  parallel.expert_map = map;
  const LiveModel fresh = load_live(model, parallel);
  ASSERT_EQ(fresh.ranks.size(), live.ranks.size());
  for (size_t r = 0; r < live.ranks.size(); ++r) {
    ASSERT_EQ(fresh.plan.ranks[r].params.size(), live.plan.ranks[r].params.size());
    for (size_t i = 0; i < live.plan.ranks[r].params.size(); ++i) {
      const PlanParam& p = live.plan.ranks[r].params[i];
      const PlanParam& q = fresh.plan.ranks[r].params[i];
      ASSERT_EQ(p.name, q.name);
      ASSERT_EQ(p.offset, q.offset) << p.name;
      EXPECT_EQ(std::memcmp(live.ranks[r].buffer.data() + p.offset, fresh.ranks[r].buffer.data() + q.offset,
                            p.nbytes),
                0)
          << "rank " << r << " " << p.name;
    }
  }
}

ParallelConfig dp_layout(bool dynamic_fp8) {
  ParallelConfig p = testing::layout(8, 4, dynamic_fp8);
  p.dp = 4;                  // attention over 2 ranks, embeddings replicated
  p.replicate_dense_mlp = true;
  return p;
}

class DpReload : public ::testing::TestWithParam<std::string> {};  // quantization

TEST_P(DpReload, UpdateAndRebalanceInPlaceEqualAFreshLoad) {
  TempDir dir;
  const bool dynamic = GetParam() == "dynamic";
  const std::string quant = dynamic ? "none" : GetParam();
  const std::string a = make_model(dir, "qwen3_moe", 11, quant);
  const std::string b = make_model(dir, "qwen3_moe", 12, quant);
  const ParallelConfig parallel = dp_layout(dynamic);
  LiveModel live = load_live(a, parallel);
  const auto where = addresses(live);

  // A full update to B, then the attention of A back: live = A's attention, B's everything else.
  update_weights(live, b, {});
  expect_equals_fresh_load(live, b, parallel);
  update_weights(live, a, {.substrings = {"self_attn"}});
  EXPECT_EQ(addresses(live), where);

  // Rebalance: reverse every layer's placement (experts change EP rank, 8 experts over ep 4).
  std::vector<std::vector<int>> map = live.plan.physical_to_logical;
  for (auto& row : map) std::reverse(row.begin(), row.end());
  const UpdateResult moved = rebalance_experts(live, map);
  EXPECT_EQ(moved.read_bytes, 0u);
  EXPECT_GT(moved.remote_bytes, 0u);
  EXPECT_EQ(addresses(live), where);

  // Reference: B under the new map, with A's attention: the same two steps on a fresh load.
  ParallelConfig mapped = parallel;
  mapped.expert_map = map;
  LiveModel reference = load_live(b, mapped);
  update_weights(reference, a, {.substrings = {"self_attn"}});
  for (size_t r = 0; r < live.ranks.size(); ++r) {
    for (size_t i = 0; i < live.plan.ranks[r].params.size(); ++i) {
      const PlanParam& p = live.plan.ranks[r].params[i];
      const PlanParam& q = reference.plan.ranks[r].params[i];
      ASSERT_EQ(p.name, q.name);
      EXPECT_EQ(std::memcmp(live.ranks[r].buffer.data() + p.offset,
                            reference.ranks[r].buffer.data() + q.offset, p.nbytes),
                0)
          << "rank " << r << " " << p.name;
    }
  }
  EXPECT_EQ(live.plan.parallel.dp, 4) << "the layout survives the rebalance";
}

INSTANTIATE_TEST_SUITE_P(Quantizations, DpReload, ::testing::Values("none", "fp8", "dynamic"));

}  // namespace
}  // namespace shardload
