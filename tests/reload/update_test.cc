// In-place updates: full, filtered (substrings, regex, experts) and bounded-staging updates give
// the bytes of a fresh load of the new checkpoint for exactly the modules they touch; buffers keep
// their addresses.
#include <gtest/gtest.h>

#include "reload_fixture.h"
#include "shardload/error.h"

namespace shardload {
namespace {

using namespace ::shardload::testing;

struct UpdateCase {
  std::string arch;
  std::string quant;
  std::string activation;
  int tp;
  int ep;
  bool dynamic;
};

class FullUpdate : public ::testing::TestWithParam<UpdateCase> {};

TEST_P(FullUpdate, GivesTheBytesOfAFreshLoadInPlace) {
  const UpdateCase& c = GetParam();
  TempDir dir;
  const std::string a = make_model(dir, c.arch, 1, c.quant, c.activation);
  const std::string b = make_model(dir, c.arch, 2, c.quant, c.activation);
  LiveModel live = load_live(a, layout(c.tp, c.ep, c.dynamic));
  const auto where = addresses(live);
  const LiveModel fresh_b = load_live(b, layout(c.tp, c.ep, c.dynamic));

  const UpdateResult result = update_weights(live, b, {});
  EXPECT_EQ(result.version, 1u);
  EXPECT_EQ(live.version, 1u);
  EXPECT_EQ(result.groups, 1u);
  EXPECT_EQ(addresses(live), where);
  expect_unchanged(snapshot(fresh_b), live);
  uint64_t exported = 0;
  for (const RankPlan& rank : live.plan.ranks) {
    for (const PlanParam& p : rank.params) exported += p.exported() ? 1 : 0;
  }
  EXPECT_EQ(result.updated_tensors, exported);
  for (const RankWeights& w : live.ranks) {
    for (uint8_t flag : w.processed) EXPECT_EQ(flag, 1);
  }

  // Back to the first checkpoint: the same bytes as its own fresh load (post-processing ran once
  // per update).
  const LiveModel fresh_a = load_live(a, layout(c.tp, c.ep, c.dynamic));
  EXPECT_EQ(update_weights(live, a, {}).version, 2u);
  expect_unchanged(snapshot(fresh_a), live);
  EXPECT_EQ(addresses(live), where);
}

INSTANTIATE_TEST_SUITE_P(Layouts, FullUpdate,
                         ::testing::Values(
                             UpdateCase{"qwen3_moe", "none", "", 2, 2, false},
                             UpdateCase{"qwen3_moe", "fp8", "", 4, 2, false},
                             UpdateCase{"qwen3_moe", "fp8", "dynamic", 2, 1, false},
                             UpdateCase{"qwen3_moe", "none", "", 2, 2, true},
                             UpdateCase{"deepseek_v3", "fp8-block", "", 2, 2, false},
                             UpdateCase{"llama", "none", "", 2, 1, false},
                             UpdateCase{"mixtral", "fp8", "", 2, 2, false},
                             UpdateCase{"qwen3_moe", "ct-fp8-tensor", "", 4, 2, false},
                             UpdateCase{"deepseek_v3", "ct-fp8-channel", "", 4, 2, false},
                             UpdateCase{"llama", "ct-fp8-block", "", 2, 1, false},
                             UpdateCase{"deepseek_v32", "fp8-block", "", 4, 2, false},
                             UpdateCase{"minimax_m2", "fp8-block", "", 4, 2, false},
                             UpdateCase{"qwen3_next", "fp8-block", "", 4, 2, false},
                             UpdateCase{"qwen3_5_moe", "fp8-block", "", 4, 2, false},
                             UpdateCase{"qwen3_moe", "ct-w4a16", "", 2, 2, false},
                             UpdateCase{"deepseek_v3", "ct-w8a8", "", 2, 1, false},
                             UpdateCase{"qwen3_moe", "ct-nvfp4", "", 4, 2, false},
                             UpdateCase{"qwen3_moe", "modelopt-nvfp4", "", 4, 2, false},
                             UpdateCase{"qwen3_moe", "gptq", "", 2, 2, false}),
                         [](const auto& info) {
                           const UpdateCase& c = info.param;
                           std::string quant = c.quant;
                           std::erase(quant, '-');
                           return c.arch + "_" + quant +
                                  c.activation + "_tp" + std::to_string(c.tp) + "ep" +
                                  std::to_string(c.ep) + (c.dynamic ? "_dynamic" : "");
                         });

// Which live parameters an update may change: those of the modules a selected tensor feeds.
void expect_split(const LiveModel& live, const Snapshot& old_bytes, const Snapshot& new_bytes,
                  const std::function<bool(size_t rank, const PlanParam&)>& updated) {
  size_t changed = 0;
  for (size_t r = 0; r < live.ranks.size(); ++r) {
    for (const PlanParam& p : live.plan.ranks[r].params) {
      const bool want_new = updated(r, p);
      EXPECT_TRUE(param_equals(want_new ? new_bytes : old_bytes, r, p, live))
          << "rank " << r << " " << p.name << " should hold the " << (want_new ? "new" : "old")
          << " bytes";
      changed += want_new ? 1 : 0;
    }
  }
  EXPECT_GT(changed, 0u);
}

TEST(FilteredUpdate, SubstringFilterReloadsOnlyTheRoutedExperts) {
  TempDir dir;
  const std::string a = make_model(dir, "qwen3_moe", 1, "fp8");
  const std::string b = make_model(dir, "qwen3_moe", 2, "fp8");
  LiveModel live = load_live(a, layout(2, 2));
  const Snapshot old_bytes = snapshot(live);
  const Snapshot new_bytes = snapshot(load_live(b, layout(2, 2)));
  const UpdateResult result = update_weights(live, b, {.substrings = {"mlp.experts"}});
  expect_split(live, old_bytes, new_bytes, [](size_t, const PlanParam& p) {
    return p.name.find("mlp.experts.") != std::string::npos;
  });
  EXPECT_EQ(result.version, 1u);
  EXPECT_GT(result.changed_bytes, 0u);
  EXPECT_EQ(live.model_path, b);
}

TEST(FilteredUpdate, RegexFilterReloadsTheNormsOfOneLayer) {
  TempDir dir;
  const std::string a = make_model(dir, "qwen3", 1);
  const std::string b = make_model(dir, "qwen3", 2);
  LiveModel live = load_live(a, layout(2, 1));
  const Snapshot old_bytes = snapshot(live);
  const Snapshot new_bytes = snapshot(load_live(b, layout(2, 1)));
  const UpdateResult result = update_weights(live, b, {.regex = "^model\\.layers\\.1\\..*norm"});
  expect_split(live, old_bytes, new_bytes, [](size_t, const PlanParam& p) {
    return p.name.rfind("model.layers.1.", 0) == 0 && p.name.find("norm") != std::string::npos;
  });
  EXPECT_EQ(result.updated_tensors,
            2u * 4u);  // input, post-attention, q and k norms, on each of 2 ranks
}

// Expert filters (only the selected experts' slots): expert_update_test.cc.

TEST(FilteredUpdate, BoundedStagingCommitsInGroupsWithTheSameResult) {
  TempDir dir;
  const std::string a = make_model(dir, "qwen3_moe", 1, "fp8");
  const std::string b = make_model(dir, "qwen3_moe", 2, "fp8");
  LiveModel live = load_live(a, layout(2, 2));
  const auto where = addresses(live);
  const Snapshot new_bytes = snapshot(load_live(b, layout(2, 2)));
  int begins = 0;
  int ends = 0;
  UpdateOptions options;
  options.staging_bytes = 256 << 10;
  options.begin_commit = [&] { ++begins; };
  options.end_commit = [&] { ++ends; };
  const UpdateResult result = update_weights(live, b, {}, options);
  EXPECT_GT(result.groups, 1u);
  EXPECT_EQ(begins, static_cast<int>(result.groups));
  EXPECT_EQ(ends, begins);
  EXPECT_EQ(result.version, 1u);
  expect_unchanged(new_bytes, live);
  EXPECT_EQ(addresses(live), where);
}

TEST(FilteredUpdate, FilterFunctionMatchesSubstringRegexAndExperts) {
  EXPECT_TRUE(filter_selects({}, "anything"));
  EXPECT_TRUE(
      filter_selects({.substrings = {"experts"}}, "model.layers.0.mlp.experts.1.up_proj.weight"));
  EXPECT_FALSE(filter_selects({.substrings = {"experts"}}, "model.norm.weight"));
  EXPECT_TRUE(filter_selects({.regex = "layers\\.[0-9]+\\.self_attn"},
                             "model.layers.12.self_attn.q_proj.weight"));
  EXPECT_FALSE(filter_selects({.regex = "^lm_head"}, "model.lm_head.weight"));
  const WeightFilter experts{.experts = {{3, 17}}};
  EXPECT_TRUE(filter_selects(experts, "model.layers.3.mlp.experts.17.down_proj.weight"));
  EXPECT_TRUE(filter_selects(experts, "model.layers.3.block_sparse_moe.experts.17.w2.weight"));
  EXPECT_FALSE(filter_selects(experts, "model.layers.3.mlp.experts.171.down_proj.weight"));
  EXPECT_FALSE(filter_selects(experts, "model.layers.13.mlp.experts.17.down_proj.weight"));
  EXPECT_FALSE(filter_selects(experts, "model.layers.3.mlp.shared_experts.down_proj.weight"));
  EXPECT_THROW(filter_selects({.regex = "("}, "x"), Error);
}

}  // namespace
}  // namespace shardload
