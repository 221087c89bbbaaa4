// The scope of every parameter group under each data-parallel layout, as docs/layout.md's
// table ("Data-parallel attention") writes it, and the group of ranks each scope cuts over.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "shardload/plan.h"

namespace shardload {
namespace {

using Scopes = std::map<std::string, std::string>;

Scopes scopes_of(const ParallelConfig& p) {
  Scopes out;
  for (const ParamGroup group : kScopedGroups) {
    out[std::string(group_name(group))] = std::string(scope_name(p.scope(group)));
  }
  return out;
}

ParallelConfig layout(int tp, int dp) {
  ParallelConfig p;
  p.tp = tp;
  p.dp = dp;
  return p;
}

TEST(Scopes, PlainLayoutSplitsEverythingOverTheWorld) {
  const ParallelConfig p = layout(8, 1);
  EXPECT_EQ(scopes_of(p), (Scopes{{"attention", "world"}, {"embedding", "world"}, {"lm_head", "world"},
                                  {"dense_mlp", "world"}, {"shared_experts", "world"}}));
  EXPECT_FALSE(p.has_dp_fields());
  ParallelConfig unsplit = p;
  unsplit.split_shared_experts = false;
  EXPECT_EQ(scopes_of(unsplit)["shared_experts"], "replicated");
  EXPECT_FALSE(unsplit.has_dp_fields()) << "--no-split-shared-experts is a plain-layout field";
}

TEST(Scopes, SglangDefaults) {
  const ParallelConfig p = layout(8, 2);
  EXPECT_EQ(scopes_of(p), (Scopes{{"attention", "attention"}, {"embedding", "replicated"},
                                  {"lm_head", "world"}, {"dense_mlp", "world"}, {"shared_experts", "world"}}));
  EXPECT_TRUE(p.has_dp_fields());
}

TEST(Scopes, SglangFlags) {
  ParallelConfig p = layout(8, 4);
  p.dp_lm_head = true;
  p.replicate_dense_mlp = true;
  p.split_shared_experts = false;  // --moe-a2a-backend deepep
  EXPECT_EQ(scopes_of(p), (Scopes{{"attention", "attention"}, {"embedding", "replicated"},
                                  {"lm_head", "attention"}, {"dense_mlp", "replicated"},
                                  {"shared_experts", "replicated"}}));
  ParallelConfig dense_only = layout(8, 1);
  dense_only.replicate_dense_mlp = true;
  EXPECT_EQ(scopes_of(dense_only)["dense_mlp"], "replicated");
  EXPECT_TRUE(dense_only.has_dp_fields()) << "a moved scope must be recorded even at dp 1";
}

TEST(Scopes, VllmReplicasHoldEveryDenseGroupOverTheirRanks) {
  ParallelConfig p = layout(8, 2);
  p.dp_style = DpStyle::kVllm;
  EXPECT_EQ(scopes_of(p), (Scopes{{"attention", "attention"}, {"embedding", "attention"},
                                  {"lm_head", "attention"}, {"dense_mlp", "attention"},
                                  {"shared_experts", "attention"}}));
  p.split_shared_experts = false;
  EXPECT_EQ(scopes_of(p)["shared_experts"], "replicated");
}

TEST(Scopes, SplitGroupsSizesAndIndices) {
  ParallelConfig p = layout(8, 2);
  p.ep = 4;
  EXPECT_EQ(p.attention_tp(), 4);
  // Rank 6: DP rank 1, attention rank 2; experts: EP rank 3 of moe_tp 2, index 0.
  EXPECT_EQ(p.dp_rank(6), 1);
  EXPECT_EQ(p.attention_rank(6), 2);
  const auto check = [&](ParamGroup group, uint64_t size, uint64_t index) {
    const SplitGroup g = p.split_group(group, 6);
    EXPECT_EQ(g.size, size) << group_name(group);
    EXPECT_EQ(g.index, index) << group_name(group);
  };
  check(ParamGroup::kAttention, 4, 2);
  check(ParamGroup::kEmbedding, 1, 0);
  check(ParamGroup::kLmHead, 8, 6);
  check(ParamGroup::kDenseMlp, 8, 6);
  check(ParamGroup::kSharedExperts, 8, 6);
  check(ParamGroup::kExperts, 2, 0);
  check(ParamGroup::kReplicated, 1, 0);
}

}  // namespace
}  // namespace shardload
