// The two building blocks on their own: the tie-breaking rules of the spec, item by item.
#include "eplb/steps.h"

#include <gtest/gtest.h>

#include <vector>

namespace shardload::eplb {
namespace {

TEST(EplbStepsTest, OneItemPerPackIsTheIdentityWithoutSorting) {
  const std::vector<float> w = {1, 9, 5, 9};
  const Packing p = balanced_packing(w, 4);
  EXPECT_EQ(p.pack, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(p.rank, (std::vector<int>{0, 0, 0, 0}));
}

TEST(EplbStepsTest, HeaviestFirstIntoTheLightestOpenPack) {
  // Order 9(1) 7(3) 5(2) 1(0): 9->0, 7->1, 5->1 (7 < 9), 1->0 (pack 1 is full).
  const std::vector<float> w = {1, 9, 5, 7};
  const Packing p = balanced_packing(w, 2);
  EXPECT_EQ(p.pack, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(p.rank, (std::vector<int>{1, 0, 1, 0}));
}

TEST(EplbStepsTest, EqualWeightsKeepIndexOrderAndTiesGoToTheLowestPack) {
  const std::vector<float> w = {2, 2, 2, 2, 2, 2};
  const Packing p = balanced_packing(w, 3);
  // 0->0, 1->1, 2->2, then all packs weigh 2: 3->0, 4->1, 5->2.
  EXPECT_EQ(p.pack, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(p.rank, (std::vector<int>{0, 0, 0, 1, 1, 1}));
}

TEST(EplbStepsTest, FullPacksAreSkippedEvenWhenLightest) {
  // 10->0, 1->1, 1->1 (1 < 10, pack 1 now full), 1->0.
  const std::vector<float> w = {10, 1, 1, 1};
  const Packing p = balanced_packing(w, 2);
  EXPECT_EQ(p.pack, (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(p.rank, (std::vector<int>{0, 0, 1, 1}));
}

TEST(EplbStepsTest, ReplicasGoToTheLargestShareLowestIndexOnTies) {
  const std::vector<float> w = {6, 6, 2};
  const Replication r = replicate_experts(w, 6);
  // Extras: 0 (6 vs 6), 1 (3 vs 6), then 0 (3,3,2), then 1 (2,3,2).
  EXPECT_EQ(r.physical_to_logical, (std::vector<int>{0, 1, 2, 0, 1, 0}));
  EXPECT_EQ(r.rank, (std::vector<int>{0, 0, 0, 1, 1, 2}));
  EXPECT_EQ(r.count, (std::vector<int>{3, 2, 1}));
}

TEST(EplbStepsTest, NoExtraReplicas) {
  const std::vector<float> w = {3, 1};
  const Replication r = replicate_experts(w, 2);
  EXPECT_EQ(r.physical_to_logical, (std::vector<int>{0, 1}));
  EXPECT_EQ(r.rank, (std::vector<int>{0, 0}));
  EXPECT_EQ(r.count, (std::vector<int>{1, 1}));
}

TEST(EplbStepsTest, SharesAreComparedInFloat32) {
  // 1 / 3 rounds up in float32 to exactly the second weight, a tie that the lowest index wins; in
  // double 1 / 3 would be smaller and the fourth extra replica would go to expert 1 instead.
  const std::vector<float> w = {1.0f, 1.0f / 3.0f};
  const Replication r = replicate_experts(w, 5);
  EXPECT_EQ(r.count, (std::vector<int>{4, 1}));
}

}  // namespace
}  // namespace shardload::eplb
