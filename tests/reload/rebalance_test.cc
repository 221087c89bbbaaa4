// Expert rebalancing in place: the result equals a fresh load under the new map (merged FP8 scales
// recomputed), only changed slots are written, experts the rank holds are copied locally, and a bad
// map is rejected before any change.
#include <gtest/gtest.h>

#include "reload_fixture.h"
#include "shardload/error.h"

namespace shardload {
namespace {

using namespace ::shardload::testing;

// physical slot p -> logical expert, one row per MoE layer.
using Map = std::vector<std::vector<int>>;

Map rows(int layers, std::vector<int> row) {
  return Map(static_cast<size_t>(layers), std::move(row));
}

struct RebalanceCase {
  std::string quant;
  std::string activation;
  bool dynamic;
};

class Rebalance : public ::testing::TestWithParam<RebalanceCase> {};

TEST_P(Rebalance, EqualsAFreshLoadUnderTheNewMap) {
  const RebalanceCase& c = GetParam();
  TempDir dir;
  const std::string model = make_model(dir, "qwen3_moe", 1, c.quant, c.activation);
  // 8 experts + 2 redundant on ep 2: 5 slots per rank.
  ParallelConfig parallel = layout(2, 2, c.dynamic);
  const Plan probe = load_live(model, parallel).plan;
  const int layers = static_cast<int>(probe.physical_to_logical.size());
  const bool eight = probe.model.experts == 8;  // the block-FP8 tiny model has 4
  parallel.expert_map = rows(layers, eight ? std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 0, 1}
                                           : std::vector<int>{0, 1, 2, 3, 0, 1});
  LiveModel live = load_live(model, parallel);
  const auto where = addresses(live);
  const Snapshot before = snapshot(live);

  // Rank 0 keeps slots 0 and 2, moves expert 1 (held in slot 1) to slot 3 by a local copy, copies 7
  // and 6 from rank 1; rank 1 keeps 4 and 5, gains 3 (from rank 0), keeps 0 and 1 in its redundant
  // slots. With 4 experts (3 slots per rank): 0 1 2 -> 0 3 1 (3 from rank 1, 1 copied locally) and
  // 3 0 1 -> 2 0 1 (2 from rank 0).
  const Map next = rows(layers, eight ? std::vector<int>{0, 7, 2, 1, 6, 4, 5, 3, 0, 1}
                                      : std::vector<int>{0, 3, 1, 2, 0, 1});
  const UpdateResult result = rebalance_experts(live, next);
  EXPECT_EQ(result.version, 1u);
  EXPECT_GT(result.local_bytes, 0u);
  EXPECT_EQ(addresses(live), where);
  ParallelConfig fresh = parallel;
  fresh.expert_map = next;
  expect_unchanged(snapshot(load_live(model, fresh)), live);
  EXPECT_EQ(live.plan.physical_to_logical, next);

  // Unchanged slots were not part of the commit: the changed bytes are those of the moved slots (4
  // of 10 per layer on the 2 tp ranks of each ep rank... counted from the live layout) plus the
  // small merged tables.
  uint64_t expert_bytes = 0;
  for (const PlanParam& p : live.plan.ranks[0].params) {
    if (p.name.find("mlp.experts.") != std::string::npos) expert_bytes += p.nbytes;
  }
  EXPECT_LT(result.changed_bytes, expert_bytes * live.ranks.size());
  EXPECT_GT(result.changed_bytes, 0u);
  (void)before;

  // Back to the first map: again equal to a fresh load of it.
  rebalance_experts(live, parallel.expert_map);
  expect_unchanged(before, live);
  EXPECT_EQ(live.version, 2u);
}

INSTANTIATE_TEST_SUITE_P(Quantization, Rebalance,
                         ::testing::Values(RebalanceCase{"none", "", false},
                                           RebalanceCase{"fp8", "", false},
                                           RebalanceCase{"fp8", "dynamic", false},
                                           RebalanceCase{"none", "", true},
                                           RebalanceCase{"fp8-block", "", false},
                                           RebalanceCase{"ct-fp8-channel", "", false},
                                           RebalanceCase{"ct-fp8-tensor", "", false},
                                           RebalanceCase{"ct-w4a16-asym", "", false},
                                           RebalanceCase{"ct-w8a8", "", false},
                                           RebalanceCase{"ct-nvfp4", "", false},
                                           // Its experts' input scales are every expert's on every rank: kept.
                                           RebalanceCase{"modelopt-nvfp4", "", false},
                                           RebalanceCase{"gptq", "", false},
                                           RebalanceCase{"awq", "", false}),
                         [](const auto& info) {
                           const RebalanceCase& c = info.param;
                           std::string quant = c.quant;
                           std::erase(quant, '-');
                           return quant +
                                  c.activation + (c.dynamic ? "_dynamic" : "");
                         });

TEST(RebalanceErrors, BadMapsAreRejectedBeforeAnyChange) {
  TempDir dir;
  const std::string model = make_model(dir, "qwen3_moe", 1);
  LiveModel live = load_live(model, layout(2, 2));
  const Snapshot before = snapshot(live);
  auto expect_rejected = [&](const Map& map, const std::string& needle) {
    try {
      rebalance_experts(live, map);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    expect_unchanged(before, live);
    EXPECT_EQ(live.version, 0u);
  };
  expect_rejected(rows(3, {0, 1, 2, 3, 4, 5, 6, 8}), "names expert 8, but the model has 8");
  expect_rejected(rows(3, {0, 1, 2, 3, 4, 5, 6, -1}), "names expert -1, but the model has 8");
  expect_rejected(rows(3, {0, 1, 2, 3, 4, 5, 6}), "7 physical experts, fewer than 8 logical");
  expect_rejected(rows(3, {0, 1, 2, 3, 4, 5, 6, 7, 0}), "keeps the number of physical slots");
  expect_rejected(rows(2, {0, 1, 2, 3, 4, 5, 6, 7}), "2 rows for 3 MoE layers");
  expect_rejected(rows(3, {0, 0, 1, 2, 3, 4, 5, 6}), "places 7 of 8 logical experts");
}

TEST(RebalanceErrors, DenseModelHasNothingToRebalance) {
  TempDir dir;
  LiveModel live = load_live(make_model(dir, "llama", 1), layout(2, 1));
  EXPECT_THROW(rebalance_experts(live, {{0}}), Error);
}

}  // namespace
}  // namespace shardload
