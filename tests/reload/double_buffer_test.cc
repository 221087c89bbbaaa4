// Double buffering (LiveModel::spare): each change stages into the spare buffers and swaps them with
// the live ones. After every change, whatever the order of full, filtered and expert updates and
// rebalances, the live buffers hold the bytes of a fresh load of what was applied, and the spare is
// brought up to date by copying only what the last change rewrote and this one does not.
#include <gtest/gtest.h>

#include <cstring>

#include "reload_fixture.h"
#include "shardload/error.h"

namespace shardload {
namespace {

using namespace ::shardload::testing;

// A spare for every live rank, a copy of it (what the weight server makes at load).
void add_spare(LiveModel& live) {
  for (const RankWeights& rank : live.ranks) {
    live.spare.buffers.emplace_back(rank.buffer.size());
    std::memcpy(live.spare.buffers.back().data(), rank.buffer.data(), rank.buffer.size());
  }
}

std::vector<const std::byte*> spare_addresses(const LiveModel& live) {
  std::vector<const std::byte*> out;
  for (const AlignedBuffer& b : live.spare.buffers) out.push_back(b.data());
  return out;
}

TEST(DoubleBuffer, EveryChangeIsAFreshLoadAndTheBuffersAlternate) {
  TempDir dir;
  const std::string a = make_model(dir, "qwen3_moe", 1, "fp8", "");
  const std::string b = make_model(dir, "qwen3_moe", 2, "fp8", "");
  const ParallelConfig parallel = layout(2, 2);
  LiveModel live = load_live(a, parallel);
  add_spare(live);
  const std::vector<const std::byte*> first = addresses(live);
  const std::vector<const std::byte*> second = spare_addresses(live);

  // A full update: nothing to copy first (the spare is a copy), one swap.
  const UpdateResult full = update_weights(live, b, {});
  EXPECT_EQ(full.synced_bytes, 0u);
  EXPECT_EQ(full.groups, 1u);
  EXPECT_EQ(addresses(live), second);
  EXPECT_EQ(spare_addresses(live), first);
  expect_unchanged(snapshot(load_live(b, parallel)), live);

  // The experts of layer 1 back to A, twice: the first copies every byte B's update wrote but these
  // experts into the spare; the second, the same filter again (RL weight sync), copies nothing.
  const WeightFilter experts{.substrings = {"layers.1.mlp.experts."}};
  const UpdateResult once = update_weights(live, a, experts);
  EXPECT_EQ(addresses(live), first);
  EXPECT_GT(once.synced_bytes, 0u);
  EXPECT_EQ(once.synced_bytes + once.changed_bytes, full.changed_bytes);
  const UpdateResult again = update_weights(live, a, experts);
  EXPECT_EQ(again.synced_bytes, 0u);
  EXPECT_EQ(addresses(live), second);
  // B with layer 1's experts of A: a fresh load of B with those bytes of a fresh load of A.
  const LiveModel fresh_a = load_live(a, parallel);
  LiveModel expected = load_live(b, parallel);
  for (size_t r = 0; r < expected.ranks.size(); ++r) {
    for (const PlanParam& p : expected.plan.ranks[static_cast<size_t>(expected.ranks[r].rank)].params) {
      if (p.name.find("layers.1.mlp.experts.") == std::string::npos) continue;
      std::memcpy(expected.ranks[r].buffer.data() + p.offset, fresh_a.ranks[r].buffer.data() + p.offset, p.nbytes);
    }
  }
  expect_unchanged(snapshot(expected), live);

  // A rebalance moves live bytes into the spare and swaps too.
  std::vector<std::vector<int>> map = live.plan.physical_to_logical;
  for (std::vector<int>& row : map) std::reverse(row.begin(), row.end());
  const UpdateResult moved = rebalance_experts(live, map);
  EXPECT_EQ(addresses(live), first);
  ParallelConfig rebalanced = parallel;
  rebalanced.expert_map = map;
  LiveModel expected_moved = load_live(b, rebalanced);
  const LiveModel fresh_a_moved = load_live(a, rebalanced);
  for (size_t r = 0; r < expected_moved.ranks.size(); ++r) {
    for (const PlanParam& p :
         expected_moved.plan.ranks[static_cast<size_t>(expected_moved.ranks[r].rank)].params) {
      if (p.name.find("layers.1.mlp.experts.") == std::string::npos) continue;
      std::memcpy(expected_moved.ranks[r].buffer.data() + p.offset, fresh_a_moved.ranks[r].buffer.data() + p.offset,
                  p.nbytes);
    }
  }
  expect_unchanged(snapshot(expected_moved), live);
  EXPECT_GT(moved.changed_bytes, 0u);

  // And a full update after all of that: A, whole.
  update_weights(live, a, {});
  EXPECT_EQ(addresses(live), second);
  expect_unchanged(snapshot(load_live(a, rebalanced)), live);
}

TEST(DoubleBuffer, AFailedUpdateChangesNothingAndTheNextOneIsWhole) {
  TempDir dir;
  const std::string a = make_model(dir, "llama", 1, "none", "");
  const std::string b = make_model(dir, "llama", 2, "none", "");
  const std::string other = make_model(dir, "qwen3_moe", 3, "none", "");
  const ParallelConfig parallel = layout(2, 1);
  LiveModel live = load_live(a, parallel);
  add_spare(live);
  const std::vector<const std::byte*> first = addresses(live);
  update_weights(live, b, {});
  const Snapshot before = snapshot(live);
  const std::vector<const std::byte*> where = addresses(live);
  // A checkpoint of another layout fails before anything is staged; a cancelled one after staging
  // into the spare.
  EXPECT_THROW(update_weights(live, other, {}), Error);
  std::atomic<bool> cancel{true};
  EXPECT_THROW(update_weights(live, a, {}, {.cancel = &cancel}), Error);
  EXPECT_EQ(addresses(live), where);
  EXPECT_NE(addresses(live), first);
  expect_unchanged(before, live);
  EXPECT_EQ(live.version, 1u);
  // The spare holds a part of A now: the next update must not trust it.
  const UpdateResult next = update_weights(live, b, {.substrings = {"layers.1."}});
  EXPECT_EQ(addresses(live), first);
  expect_unchanged(snapshot(load_live(b, parallel)), live);
  EXPECT_GT(next.synced_bytes, 0u);
}

}  // namespace
}  // namespace shardload
