// A rebalance moves the live bytes: after an update from checkpoint B filtered to attention, moving
// experts within and across ranks gives exactly a fresh load of A under the new map followed by the
// same update (not B's experts, not a mix), with every processed FP8 scale row moved and the
// per-rank input scales recomputed; it reads nothing, so it works once A's directory is gone; and
// its plan is the one a fresh load under the new map makes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>

#include "reload_fixture.h"
#include "shardload/checkpoint.h"
#include "shardload/error.h"

namespace shardload {
namespace {

using namespace ::shardload::testing;
namespace fs = std::filesystem;

using Map = std::vector<std::vector<int>>;

struct LiveRebalanceCase {
  std::string quant;       // make_tiny --quant
  std::string activation;  // make_tiny --activation-scheme ("" : the default, static for fp8)
  bool dynamic;            // --quantization fp8 on a bf16 checkpoint
};

std::string case_name(const ::testing::TestParamInfo<LiveRebalanceCase>& info) {
  const LiveRebalanceCase& c = info.param;
  return (c.quant == "fp8-block" ? std::string("fp8block") : c.quant) + c.activation +
         (c.dynamic ? "_dynamic" : "");
}

// tp 4, ep 2 (two tensor-parallel ranks per expert rank, so a slot copied from the other expert
// rank must come from the rank with the same cut). 8 experts + 2 redundant: 5 slots per EP rank;
// the block-FP8 tiny model has 4 experts: 3 slots.
ParallelConfig with_map(const LiveRebalanceCase& c, const Map& map) {
  ParallelConfig parallel = layout(4, 2, c.dynamic);
  parallel.expert_map = map;
  return parallel;
}

int moe_layers(const std::string& model) {
  return static_cast<int>(load_live(model, layout(1, 1)).plan.physical_to_logical.size());
}

struct Maps {
  Map before;
  Map after;
};

// After: EP rank 0 keeps slot 0, takes an expert from the other EP rank (whose slot is rewritten
// too, so both must be staged before either commits), and moves one of its own; EP rank 1 likewise.
// The second MoE layer (when there is one) gets another permutation.
Maps maps(int layers, bool eight) {
  Maps m;
  const std::vector<int> before =
      eight ? std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 0, 1} : std::vector<int>{0, 1, 2, 3, 0, 1};
  const std::vector<int> after =
      eight ? std::vector<int>{0, 3, 6, 1, 2, 5, 4, 7, 0, 2} : std::vector<int>{0, 3, 1, 2, 0, 1};
  const std::vector<int> other =
      eight ? std::vector<int>{7, 6, 5, 4, 3, 2, 1, 0, 0, 1} : std::vector<int>{3, 2, 1, 0, 1, 2};
  m.before.assign(static_cast<size_t>(layers), before);
  m.after.assign(static_cast<size_t>(layers), after);
  if (layers > 1) m.after[1] = other;
  return m;
}

class RebalanceLive : public ::testing::TestWithParam<LiveRebalanceCase> {
 protected:
  void SetUp() override {
    const LiveRebalanceCase& c = GetParam();
    a_ = make_model(dir_, "qwen3_moe", 1, c.quant, c.activation);
    b_ = make_model(dir_, "qwen3_moe", 2, c.quant, c.activation);
    const Plan probe = load_live(a_, layout(1, 1, c.dynamic)).plan;
    maps_ = maps(static_cast<int>(probe.physical_to_logical.size()), probe.model.experts == 8);
  }

  // A fresh load of `model` under the new map, then the same filtered update from B.
  LiveModel reference(const std::string& model) const {
    LiveModel ref = load_live(model, with_map(GetParam(), maps_.after));
    update_weights(ref, b_, {.substrings = {"self_attn"}});
    return ref;
  }

  TempDir dir_;
  std::string a_;
  std::string b_;
  Maps maps_;
};

TEST_P(RebalanceLive, AfterAFilteredUpdateMovesTheLiveBytes) {
  LiveModel live = load_live(a_, with_map(GetParam(), maps_.before));
  update_weights(live, b_, {.substrings = {"self_attn"}});
  const auto where = addresses(live);
  const UpdateResult result = rebalance_experts(live, maps_.after);
  EXPECT_EQ(result.version, 2u);
  EXPECT_EQ(result.read_bytes, 0u);
  EXPECT_GT(result.local_bytes, 0u);   // moved within a rank
  EXPECT_GT(result.remote_bytes, 0u);  // moved across ranks
  EXPECT_EQ(addresses(live), where);

  const LiveModel ref = reference(a_);
  expect_unchanged(snapshot(ref), live);
  EXPECT_EQ(live.plan.physical_to_logical, maps_.after);
  EXPECT_EQ(live.plan.to_json(), ref.plan.to_json()) << "the plan a fresh load makes";

  // Back again: the bytes of the first placement.
  LiveModel first = load_live(a_, with_map(GetParam(), maps_.before));
  update_weights(first, b_, {.substrings = {"self_attn"}});
  rebalance_experts(live, maps_.before);
  expect_unchanged(snapshot(first), live);
  EXPECT_EQ(live.plan.to_json(), first.plan.to_json());
}

TEST_P(RebalanceLive, ReadsNothingOnceTheCheckpointIsGone) {
  const std::string copy = dir_.file("gone");
  fs::copy(a_, copy, fs::copy_options::recursive);
  LiveModel live = load_live(copy, with_map(GetParam(), maps_.before));
  update_weights(live, b_, {.substrings = {"self_attn"}});
  const LiveModel ref = reference(a_);
  fs::remove_all(b_);  // the update's checkpoint too
  fs::remove_all(copy);
  const UpdateResult result = rebalance_experts(live, maps_.after);
  EXPECT_EQ(result.version, 2u);
  EXPECT_EQ(result.read_bytes, 0u);
  expect_unchanged(snapshot(ref), live);
  EXPECT_EQ(live.plan.physical_to_logical, maps_.after);
}

// With a staging bound the rebalance commits in several groups; modules that take slots from each
// other across ranks are staged in one, so that no slot is read after its own commit rewrote it.
TEST_P(RebalanceLive, UnderAStagingBoundEqualsTheReference) {
  LiveModel live = load_live(a_, with_map(GetParam(), maps_.before));
  update_weights(live, b_, {.substrings = {"self_attn"}});
  // Room for one expert module of two ranks (a module and its partner on the other EP rank), not
  // for all of them.
  uint64_t largest = 0;
  uint64_t module_bytes = 0;
  uint32_t module = UINT32_MAX;
  for (const PlanParam& p : live.plan.ranks[0].params) {
    if (live.plan.modules[p.module].moe_layer < 0) continue;
    if (p.module != module) module_bytes = 0;
    module = p.module;
    module_bytes += (p.nbytes + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
    largest = std::max(largest, module_bytes);
  }
  const uint64_t bound = 2 * largest;
  UpdateOptions options;
  options.staging_bytes = bound;
  const UpdateResult result = rebalance_experts(live, maps_.after, options);
  EXPECT_GT(result.groups, 1u);
  expect_unchanged(snapshot(reference(a_)), live);
}

INSTANTIATE_TEST_SUITE_P(Quantization, RebalanceLive,
                         ::testing::Values(LiveRebalanceCase{"none", "", false},
                                           LiveRebalanceCase{"fp8", "", false},
                                           LiveRebalanceCase{"fp8", "dynamic", false},
                                           LiveRebalanceCase{"none", "", true},
                                           LiveRebalanceCase{"fp8-block", "", false}),
                         case_name);

// Modules that exchange slots across ranks must commit together: a bound below their size is an
// error before any change (staging one and committing it would destroy what the other copies).
TEST(RebalanceLiveErrors, PartnersLargerThanTheBoundAreRejectedBeforeAnyChange) {
  TempDir dir;
  const std::string model = make_model(dir, "qwen3_moe", 1);
  const LiveRebalanceCase c{"none", "", false};
  const Maps m = maps(moe_layers(model), true);
  LiveModel live = load_live(model, with_map(c, m.before));
  const Snapshot before = snapshot(live);
  uint64_t largest = 0;
  for (const PlanParam& p : live.plan.ranks[0].params) {
    if (live.plan.modules[p.module].moe_layer >= 0) largest = std::max(largest, p.nbytes);
  }
  UpdateOptions options;
  options.staging_bytes = largest;  // one rank's module fits, not its partner on the other EP rank
  try {
    rebalance_experts(live, m.after, options);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("staged together"), std::string::npos) << e.what();
  }
  expect_unchanged(before, live);
  EXPECT_EQ(live.version, 0u);
  EXPECT_EQ(live.plan.physical_to_logical, m.before);
}

}  // namespace
}  // namespace shardload
