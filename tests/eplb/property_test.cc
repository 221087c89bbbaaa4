// Seeded random layouts of every valid kind: the invariants any EPLB placement must keep, checked
// without re-running the algorithm. Set SHARDLOAD_EPLB_SEED to replay a failure printed with its
// seed.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "eplb/steps.h"
#include "shardload/eplb.h"

namespace shardload {
namespace {

constexpr int kCases = 400;

uint64_t base_seed() {
  const char* env = std::getenv("SHARDLOAD_EPLB_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : 20250101;
}

int pick(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

std::vector<double> random_row(std::mt19937_64& rng, int experts) {
  std::vector<double> row(experts);
  const int kind = pick(rng, 0, 3);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (double& v : row) {
    switch (kind) {
      case 0:
        v = pick(rng, 0, 5);
        break;  // many ties
      case 1:
        v = unit(rng) * 1000.0;
        break;  // spread
      case 2:
        v = std::pow(unit(rng), 8.0) * 1e6;
        break;  // skewed
      default:
        v = pick(rng, 0, 9) == 0 ? pick(rng, 1, 1000) : 0;
        break;  // a few hot, the rest idle
    }
  }
  return row;
}

EplbInput random_input(std::mt19937_64& rng) {
  EplbInput in;
  int experts = 0;
  if (pick(rng, 0, 2) != 0) {
    // Hierarchical: G % N == 0, M % N == 0, E % G == 0.
    in.nodes = pick(rng, 1, 4);
    in.groups = in.nodes * pick(rng, 1, 3);
    experts = in.groups * pick(rng, 1, 4);
    in.gpus = in.nodes * pick(rng, 1, 4);
  } else {
    // Global: G % N != 0; E, M free.
    in.nodes = pick(rng, 2, 4);
    in.groups = in.nodes * pick(rng, 0, 2) + pick(rng, 1, in.nodes - 1);
    experts = pick(rng, 1, 40);
    in.gpus = pick(rng, 1, 8);
  }
  const int per_gpu = (experts + in.gpus - 1) / in.gpus + pick(rng, 0, 3);
  in.replicas = in.gpus * per_gpu;
  const int layers = pick(rng, 1, 3);
  for (int l = 0; l < layers; ++l) in.load.push_back(random_row(rng, experts));
  return in;
}

// Greedy replication leaves no expert with an extra replica that another expert needed more: each
// expert's last replica was given when its share was the largest in its domain, and shares only
// shrink.
void expect_replication_greedy(const std::vector<float>& load, const std::vector<int>& count,
                               const std::vector<int>& domain) {
  float largest = 0.0f;
  for (const int e : domain) largest = std::max(largest, load[e] / static_cast<float>(count[e]));
  for (const int e : domain) {
    if (count[e] > 1) {
      EXPECT_GE(load[e] / static_cast<float>(count[e] - 1), largest) << "expert " << e;
    }
  }
}

void check_layer(const EplbInput& in, const EplbResult& r, size_t l) {
  SCOPED_TRACE(fmt::format("layer {}", l));
  const int experts = static_cast<int>(in.load[0].size());
  const int p = in.replicas;
  const std::vector<int>& to_logical = r.physical_to_logical_map[l];
  const std::vector<int>& count = r.logical_count[l];
  // Every GPU g owns slots [g * P/M, (g+1) * P/M): P slots in all, each naming a real expert.
  ASSERT_EQ(static_cast<int>(to_logical.size()), p);
  ASSERT_EQ(p % in.gpus, 0);
  ASSERT_EQ(static_cast<int>(count.size()), experts);
  std::vector<int> occurrences(experts, 0);
  for (const int e : to_logical) {
    ASSERT_GE(e, 0);
    ASSERT_LT(e, experts);
    ++occurrences[e];
  }
  int total = 0;
  for (int e = 0; e < experts; ++e) {
    EXPECT_GE(count[e], 1) << "expert " << e;
    EXPECT_EQ(count[e], occurrences[e]) << "expert " << e;
    total += count[e];
  }
  EXPECT_EQ(total, p);

  // logical_to_physical_map is the inverse: each slot once, ranks 0..count-1, then -1.
  const int x = static_cast<int>(r.logical_to_physical_map[l][0].size());
  std::vector<int> seen(p, 0);
  for (int e = 0; e < experts; ++e) {
    const std::vector<int>& slots = r.logical_to_physical_map[l][e];
    ASSERT_EQ(static_cast<int>(slots.size()), x);
    for (int k = 0; k < x; ++k) {
      if (k < count[e]) {
        ASSERT_GE(slots[k], 0);
        ASSERT_LT(slots[k], p);
        EXPECT_EQ(to_logical[slots[k]], e);
        ++seen[slots[k]];
      } else {
        EXPECT_EQ(slots[k], -1);
      }
    }
  }
  for (int s = 0; s < p; ++s) EXPECT_EQ(seen[s], 1) << "slot " << s;

  std::vector<float> load(experts);
  for (int e = 0; e < experts; ++e) load[e] = static_cast<float>(in.load[l][e]);
  if (!eplb_is_hierarchical(in)) {
    std::vector<int> all(experts);
    for (int e = 0; e < experts; ++e) all[e] = e;
    expect_replication_greedy(load, count, all);
    return;
  }

  // Hierarchical: every replica of a group's experts sits on the node the group was packed to.
  const int slots_per_node = p / in.nodes;
  const int group_size = experts / in.groups;
  std::vector<float> group_load(in.groups, 0.0f);
  for (int e = 0; e < experts; ++e) group_load[e / group_size] += load[e];
  const eplb::Packing packed = eplb::balanced_packing(group_load, in.nodes);
  std::vector<int> groups_on_node(in.nodes, 0);
  for (int g = 0; g < in.groups; ++g) ++groups_on_node[packed.pack[g]];
  for (int n = 0; n < in.nodes; ++n)
    EXPECT_EQ(groups_on_node[n], in.groups / in.nodes) << "node " << n;
  std::vector<std::vector<int>> experts_on_node(in.nodes);
  for (int e = 0; e < experts; ++e) {
    const int node = packed.pack[e / group_size];
    experts_on_node[node].push_back(e);
    for (int k = 0; k < count[e]; ++k) {
      EXPECT_EQ(r.logical_to_physical_map[l][e][k] / slots_per_node, node)
          << "expert " << e << " replica " << k;
    }
  }
  for (int n = 0; n < in.nodes; ++n) expect_replication_greedy(load, count, experts_on_node[n]);
}

TEST(EplbPropertyTest, RandomLayoutsKeepTheInvariants) {
  const uint64_t seed = base_seed();
  std::cout << "SHARDLOAD_EPLB_SEED=" << seed << "\n";
  int hierarchical = 0;
  for (int c = 0; c < kCases; ++c) {
    std::mt19937_64 rng(seed + c);
    const EplbInput in = random_input(rng);
    SCOPED_TRACE(fmt::format("SHARDLOAD_EPLB_SEED={} case {}: L={} E={} P={} G={} N={} M={}", seed,
                             c, in.load.size(), in.load[0].size(), in.replicas, in.groups, in.nodes,
                             in.gpus));
    hierarchical += eplb_is_hierarchical(in) ? 1 : 0;
    const EplbResult r = rebalance_experts(in);
    ASSERT_EQ(r.physical_to_logical_map.size(), in.load.size());
    ASSERT_EQ(r.logical_to_physical_map.size(), in.load.size());
    ASSERT_EQ(r.logical_count.size(), in.load.size());
    int largest = 0;
    for (const std::vector<int>& row : r.logical_count) {
      largest = std::max(largest, *std::max_element(row.begin(), row.end()));
    }
    for (size_t l = 0; l < in.load.size(); ++l) {
      for (const std::vector<int>& slots : r.logical_to_physical_map[l]) {
        ASSERT_EQ(static_cast<int>(slots.size()), largest);
      }
      check_layer(in, r, l);
    }

    const EplbResult again = rebalance_experts(in);
    EXPECT_EQ(again.physical_to_logical_map, r.physical_to_logical_map);
    EXPECT_EQ(again.logical_to_physical_map, r.logical_to_physical_map);
    EXPECT_EQ(again.logical_count, r.logical_count);

    if (!eplb_is_hierarchical(in)) {
      // The global policy is the hierarchical procedure with one group on one node.
      EplbInput flat = in;
      flat.groups = 1;
      flat.nodes = 1;
      const EplbResult same = rebalance_experts(flat);
      EXPECT_EQ(same.physical_to_logical_map, r.physical_to_logical_map);
      EXPECT_EQ(same.logical_count, r.logical_count);
    }
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Both policies must have been exercised, or the generator has drifted.
  EXPECT_GT(hierarchical, kCases / 4);
  EXPECT_LT(hierarchical, kCases * 9 / 10);
}

}  // namespace
}  // namespace shardload
