// The placements the reference produces (the spec's golden vectors and the EPLB README example),
// and every input the spec rejects.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "shardload/eplb.h"
#include "shardload/error.h"

namespace shardload {
namespace {

using Rows = std::vector<std::vector<int>>;

EplbInput input(std::vector<std::vector<double>> load, int replicas, int groups, int nodes,
                int gpus) {
  return EplbInput{.load = std::move(load),
                   .replicas = replicas,
                   .groups = groups,
                   .nodes = nodes,
                   .gpus = gpus};
}

// logical_to_physical_map must list, for every expert, exactly the slots that hold it, by replica
// rank.
void expect_consistent(const EplbResult& r) {
  ASSERT_EQ(r.logical_to_physical_map.size(), r.physical_to_logical_map.size());
  for (size_t l = 0; l < r.physical_to_logical_map.size(); ++l) {
    const std::vector<int>& to_logical = r.physical_to_logical_map[l];
    std::vector<int> seen(to_logical.size(), 0);
    for (size_t e = 0; e < r.logical_count[l].size(); ++e) {
      const std::vector<int>& slots = r.logical_to_physical_map[l][e];
      for (size_t k = 0; k < slots.size(); ++k) {
        if (static_cast<int>(k) < r.logical_count[l][e]) {
          ASSERT_GE(slots[k], 0);
          ASSERT_LT(slots[k], static_cast<int>(to_logical.size()));
          EXPECT_EQ(to_logical[slots[k]], static_cast<int>(e)) << "layer " << l << " expert " << e;
          ++seen[slots[k]];
        } else {
          EXPECT_EQ(slots[k], -1) << "layer " << l << " expert " << e << " rank " << k;
        }
      }
    }
    for (size_t p = 0; p < seen.size(); ++p)
      EXPECT_EQ(seen[p], 1) << "layer " << l << " slot " << p;
  }
}

TEST(EplbRebalanceTest, GlobalOneItemPerPackKeepsIndexOrder) {
  const EplbResult r = rebalance_experts(input({{10, 50, 30, 20}}, 4, 1, 1, 4));
  EXPECT_EQ(r.physical_to_logical_map, (Rows{{0, 1, 2, 3}}));
  EXPECT_EQ(r.logical_count, (Rows{{1, 1, 1, 1}}));
  EXPECT_EQ(r.logical_to_physical_map, (std::vector<Rows>{{{0}, {1}, {2}, {3}}}));
}

TEST(EplbRebalanceTest, GlobalWithTies) {
  const EplbResult r = rebalance_experts(input({{5, 5, 5, 5, 1, 1}}, 8, 1, 1, 4));
  EXPECT_EQ(r.physical_to_logical_map, (Rows{{2, 4, 3, 5, 0, 0, 1, 1}}));
  EXPECT_EQ(r.logical_count, (Rows{{2, 2, 1, 1, 1, 1}}));
  // Replica 0 of expert 0 is the original (slot 4), replica 1 the extra one (slot 5), and likewise
  // for 1.
  EXPECT_EQ(r.logical_to_physical_map,
            (std::vector<Rows>{{{4, 5}, {6, 7}, {0, -1}, {2, -1}, {1, -1}, {3, -1}}}));
  expect_consistent(r);
}

TEST(EplbRebalanceTest, GroupsNotDivisibleByNodesFallsBackToGlobal) {
  const EplbInput in = input({{7, 1, 3, 9, 2, 8}}, 9, 3, 2, 3);
  EXPECT_FALSE(eplb_is_hierarchical(in));
  const EplbResult r = rebalance_experts(in);
  EXPECT_EQ(r.physical_to_logical_map, (Rows{{3, 0, 2, 3, 0, 4, 5, 5, 1}}));
  EXPECT_EQ(r.logical_count, (Rows{{2, 1, 1, 2, 1, 2}}));
  expect_consistent(r);
}

TEST(EplbRebalanceTest, ReadmeExample) {
  const EplbInput in = input({{90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86},
                              {20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27}},
                             16, 4, 2, 8);
  EXPECT_TRUE(eplb_is_hierarchical(in));
  const EplbResult r = rebalance_experts(in);
  EXPECT_EQ(r.physical_to_logical_map, (Rows{{5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1},
                                             {7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1}}));
  EXPECT_EQ(r.logical_count,
            (Rows{{1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1}, {1, 2, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1}}));
  ASSERT_EQ(r.logical_to_physical_map.size(), 2u);
  for (const Rows& layer : r.logical_to_physical_map) {
    ASSERT_EQ(layer.size(), 12u);
    for (const std::vector<int>& slots : layer) EXPECT_EQ(slots.size(), 2u);  // X = 2
  }
  expect_consistent(r);
}

TEST(EplbRebalanceTest, PaddingIsTheLargestCountOverAllLayers) {
  // Layer 0 needs no extra replicas of any one expert beyond 2; layer 1 puts 3 on expert 0.
  const EplbResult r = rebalance_experts(input({{1, 1, 1, 1}, {100, 1, 1, 1}}, 6, 1, 1, 2));
  EXPECT_EQ(r.logical_count, (Rows{{2, 2, 1, 1}, {3, 1, 1, 1}}));
  for (const Rows& layer : r.logical_to_physical_map) {
    for (const std::vector<int>& slots : layer) EXPECT_EQ(slots.size(), 3u);
  }
  expect_consistent(r);
}

TEST(EplbRebalanceTest, SameInputSameOutput) {
  const EplbInput in = input({{3, 3, 3, 3, 0, 0, 7, 7}, {1, 2, 3, 4, 5, 6, 7, 8}}, 16, 4, 2, 4);
  const EplbResult a = rebalance_experts(in);
  const EplbResult b = rebalance_experts(in);
  EXPECT_EQ(a.physical_to_logical_map, b.physical_to_logical_map);
  EXPECT_EQ(a.logical_to_physical_map, b.logical_to_physical_map);
  EXPECT_EQ(a.logical_count, b.logical_count);
  EXPECT_EQ(to_json(a), to_json(b));
}

TEST(EplbRebalanceTest, JsonHasTheThreeMaps) {
  const nlohmann::json j = to_json(rebalance_experts(input({{5, 5, 5, 5, 1, 1}}, 8, 1, 1, 4)));
  EXPECT_EQ(j.size(), 3u);
  EXPECT_EQ(j["physical_to_logical_map"], nlohmann::json::parse("[[2,4,3,5,0,0,1,1]]"));
  EXPECT_EQ(j["logical_count"], nlohmann::json::parse("[[2,2,1,1,1,1]]"));
  EXPECT_EQ(j["logical_to_physical_map"],
            nlohmann::json::parse("[[[4,5],[6,7],[0,-1],[2,-1],[1,-1],[3,-1]]]"));
}

// The message the rejection of `in` carries; fails the test when it is accepted or rejected
// otherwise.
std::string rejection(const EplbInput& in) {
  try {
    rebalance_experts(in);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    try {
      validate_eplb_input(in);
    } catch (const Error& again) {
      EXPECT_STREQ(again.what(), e.what());
      return e.what();
    }
    ADD_FAILURE() << "validate_eplb_input accepted what rebalance_experts rejected: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

void expect_rejected(const EplbInput& in, const std::string& message) {
  EXPECT_EQ(rejection(in), message);
}

TEST(EplbRebalanceErrorsTest, ReplicasNotAMultipleOfGpus) {
  expect_rejected(input({{1, 2, 3, 4}}, 10, 1, 1, 4), "replicas 10 is not a multiple of gpus 4");
  // Also under the hierarchical policy.
  expect_rejected(input({{1, 2, 3, 4}}, 6, 2, 2, 4), "replicas 6 is not a multiple of gpus 4");
}

TEST(EplbRebalanceErrorsTest, FewerReplicasThanExperts) {
  expect_rejected(input({{1, 2, 3, 4, 5, 6}}, 4, 1, 1, 2),
                  "replicas 4 is fewer than the 6 logical experts");
}

TEST(EplbRebalanceErrorsTest, HierarchicalGpusNotAMultipleOfNodes) {
  expect_rejected(input({{1, 2, 3, 4}}, 6, 4, 2, 3),
                  "gpus 3 is not a multiple of nodes 2 (hierarchical policy: groups 4 divisible by "
                  "nodes 2)");
}

TEST(EplbRebalanceErrorsTest, HierarchicalExpertsNotAMultipleOfGroups) {
  expect_rejected(
      input({{1, 2, 3, 4, 5, 6}}, 8, 4, 2, 2),
      "experts 6 is not a multiple of groups 4 (hierarchical policy: groups 4 divisible by "
      "nodes 2)");
}

TEST(EplbRebalanceErrorsTest, GlobalPolicyDoesNotNeedTheHierarchicalDivisibility) {
  // G % N != 0: groups and nodes play no part, so neither M % N nor E % G matters.
  const EplbResult r = rebalance_experts(input({{1, 2, 3, 4, 5, 6}}, 6, 4, 3, 3));
  EXPECT_EQ(r.logical_count, (Rows{{1, 1, 1, 1, 1, 1}}));
}

TEST(EplbRebalanceErrorsTest, RowsOfUnequalLength) {
  expect_rejected(input({{1, 2, 3, 4}, {1, 2, 3}}, 4, 1, 1, 4),
                  "expert_load rows of unequal length: layer 1 has 3 experts, layer 0 has 4");
}

TEST(EplbRebalanceErrorsTest, NegativeLoad) {
  expect_rejected(input({{1, 2, 3, 4}, {1, -2, 3, 4}}, 4, 1, 1, 4),
                  "expert_load[1][1] = -2 is negative");
}

TEST(EplbRebalanceErrorsTest, NonFiniteLoads) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  expect_rejected(input({{1, nan, 3, 4}}, 4, 1, 1, 4), "expert_load[0][1] = nan is not finite");
  expect_rejected(input({{1, 2, inf, 4}}, 4, 1, 1, 4), "expert_load[0][2] = inf is not finite");
  expect_rejected(input({{-inf, 2, 3, 4}}, 4, 1, 1, 4), "expert_load[0][0] = -inf is not finite");
  // Finite as a double, but infinite once converted to float32 as the reference does.
  expect_rejected(input({{1, 2, 3, 1e39}}, 4, 1, 1, 4),
                  "expert_load[0][3] = 1e+39 is beyond the float32 range");
}

TEST(EplbRebalanceErrorsTest, EmptyLoad) {
  expect_rejected(input({}, 4, 1, 1, 4), "expert_load has no layers (expected at least one row)");
  expect_rejected(input({{}}, 4, 1, 1, 4), "expert_load layer 0 has no experts");
}

TEST(EplbRebalanceErrorsTest, SizesMustBePositive) {
  const std::vector<std::vector<double>> load = {{1, 2, 3, 4}};
  expect_rejected(input(load, 0, 1, 1, 4), "replicas 0 must be at least 1");
  expect_rejected(input(load, 4, 0, 1, 4), "groups 0 must be at least 1");
  expect_rejected(input(load, 4, 1, 0, 4), "nodes 0 must be at least 1");
  expect_rejected(input(load, 4, 1, 1, -4), "gpus -4 must be at least 1");
}

TEST(EplbRebalanceErrorsTest, ReplicasAboveTheLimit) {
  expect_rejected(input({{1, 2, 3, 4}}, kEplbMaxReplicas * 2, 1, 1, 4),
                  "replicas 131072 exceeds the limit 65536");
}

TEST(EplbRebalanceErrorsTest, ZeroLoadsAreValid) {
  const EplbResult r = rebalance_experts(input({{0, 0, 0, 0}}, 8, 2, 2, 4));
  // Every per-replica load ties at 0, so each extra replica goes to the lowest index of its node.
  EXPECT_EQ(r.logical_count, (Rows{{3, 1, 3, 1}}));
  expect_consistent(r);
}

}  // namespace
}  // namespace shardload
