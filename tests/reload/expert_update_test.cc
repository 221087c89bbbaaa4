// An expert filter rewrites exactly the slots of the selected experts (every replica, wherever the
// expert map puts them) and reads only their tensors; every other live byte keeps the first
// checkpoint's fresh load, and a merged static input scale is the maximum over the rank's per-part
// input scales, kept ones and new ones. The reference is built from two fresh loads, not from the
// update code.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <set>
#include <span>

#include "reload_fixture.h"

namespace shardload {
namespace {

using namespace ::shardload::testing;
using Experts = std::set<std::pair<int, int>>;  // (decoder layer, logical expert)

// The decoder layer of a rank tensor named model.layers.N....
int layer_of(const std::string& name) {
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  return std::stoi(name.substr(prefix.size()));
}

std::span<const float> floats(const std::vector<std::byte>& rank, const PlanParam& p) {
  return {reinterpret_cast<const float*>(rank.data() + p.offset), p.nbytes / sizeof(float)};
}

// What the update must leave: A's fresh load, with every slot that holds a selected expert (rows of
// every per-slot tensor: weight, scales, per-part scale tables) from B's fresh load, and every
// merged input scale the maximum of its module's resulting per-part table.
Snapshot expected_bytes(const LiveModel& a, const LiveModel& b, const Experts& experts) {
  Snapshot out = snapshot(a);
  const Snapshot from_b = snapshot(b);
  const Plan& plan = a.plan;
  const uint64_t slots = static_cast<uint64_t>(plan.physical_experts / plan.parallel.ep);
  for (size_t r = 0; r < out.size(); ++r) {
    const RankPlan& rank = plan.ranks[r];
    for (const PlanParam& p : rank.params) {
      const int moe_layer = plan.modules[p.module].moe_layer;
      if (moe_layer < 0 || p.role == ParamRole::kInputScale) continue;
      const uint64_t slot_bytes = p.nbytes / slots;
      for (uint64_t j = 0; j < slots; ++j) {
        const int expert = plan.physical_to_logical[static_cast<size_t>(moe_layer)]
                                                   [static_cast<size_t>(rank.ep_rank) * slots + j];
        if (experts.count({layer_of(p.name), expert}) == 0) continue;
        std::copy_n(from_b[r].begin() + static_cast<ptrdiff_t>(p.offset + j * slot_bytes),
                    slot_bytes, out[r].begin() + static_cast<ptrdiff_t>(p.offset + j * slot_bytes));
      }
    }
    for (const PlanParam& merged : rank.params) {
      if (merged.role != ParamRole::kInputScale || plan.modules[merged.module].moe_layer < 0) {
        continue;
      }
      const auto parts = std::find_if(rank.params.begin(), rank.params.end(), [&](const auto& p) {
        return p.module == merged.module && p.role == ParamRole::kInputScaleParts;
      });
      EXPECT_NE(parts, rank.params.end()) << merged.name;
      if (parts == rank.params.end()) continue;
      const auto table = floats(out[r], *parts);
      const float m = *std::max_element(table.begin(), table.end());
      auto* value = reinterpret_cast<float*>(out[r].data() + merged.offset);
      std::fill_n(value, merged.nbytes / sizeof(float), m);
    }
  }
  return out;
}

// Checkpoint bytes of the selected experts' tensors, each once (the reader reads a tensor once
// for every rank that holds a replica or a cut of it).
uint64_t selected_tensor_bytes(const Plan& plan, const WeightFilter& filter) {
  uint64_t bytes = 0;
  for (const PlanSource& source : plan.sources) {
    if (filter_selects(filter, source.name)) {
      bytes += source.rows * source.cols * dtype_bits(source.dtype) / 8;
    }
  }
  return bytes;
}

// Live bytes the update may rewrite, per (rank, module): the selected slots' rows, and the merged
// input scale of a module with a selected slot on that rank.
std::map<std::pair<size_t, uint32_t>, uint64_t> selected_slot_bytes(const Plan& plan,
                                                                    const Experts& experts) {
  const uint64_t slots = static_cast<uint64_t>(plan.physical_experts / plan.parallel.ep);
  std::map<std::pair<size_t, uint32_t>, uint64_t> bytes;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan& rank = plan.ranks[r];
    for (const PlanParam& p : rank.params) {
      const int moe_layer = plan.modules[p.module].moe_layer;
      if (moe_layer < 0 || p.role == ParamRole::kInputScale) continue;
      for (uint64_t j = 0; j < slots; ++j) {
        const int expert = plan.physical_to_logical[static_cast<size_t>(moe_layer)]
                                                   [static_cast<size_t>(rank.ep_rank) * slots + j];
        if (experts.count({layer_of(p.name), expert}) == 0) continue;
        bytes[{r, p.module}] += p.nbytes / slots;
      }
    }
    for (const PlanParam& p : rank.params) {
      const auto unit = bytes.find({r, p.module});
      if (p.role == ParamRole::kInputScale && unit != bytes.end()) unit->second += p.nbytes;
    }
  }
  return bytes;
}

struct Case {
  std::string name;
  std::string quant;       // make_tiny --quant
  std::string activation;  // make_tiny --activation-scheme ("": static for fp8)
  bool dynamic;            // --quantization fp8 on a bf16 checkpoint
  int tp;
  int ep;
  int redundant;
  bool eplb_map;  // a placement other than the default p -> p % E
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ExpertUpdate : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    a_ = make_model(dir_, "qwen3_moe", 1, c.quant, c.activation);
    b_ = make_model(dir_, "qwen3_moe", 2, c.quant, c.activation);
    parallel_ = layout(c.tp, c.ep, c.dynamic);
    parallel_.redundant_experts = c.redundant;
    if (c.eplb_map) {
      // Experts 1 and 3 on both EP ranks, at other slots than the default map's.
      const Plan probe = load_live(a_, layout(1, 1, c.dynamic)).plan;
      const std::vector<int> row =
          probe.model.experts == 8 ? std::vector<int>{3, 6, 1, 2, 0, 5, 4, 7, 3, 1}
                                   : std::vector<int>{3, 0, 1, 2, 1, 3};
      parallel_.expert_map.assign(probe.physical_to_logical.size(), row);
      parallel_.redundant_experts.reset();
    }
  }

  TempDir dir_;
  std::string a_;
  std::string b_;
  ParallelConfig parallel_;
};

TEST_P(ExpertUpdate, RewritesExactlyTheSlotsOfTheSelectedExperts) {
  const WeightFilter filter{.experts = {{1, 1}, {1, 3}}};
  const Experts experts(filter.experts.begin(), filter.experts.end());
  LiveModel live = load_live(a_, parallel_);
  const auto where = addresses(live);
  const LiveModel fresh_a = load_live(a_, parallel_);
  const LiveModel fresh_b = load_live(b_, parallel_);
  const Snapshot want = expected_bytes(fresh_a, fresh_b, experts);

  const UpdateResult result = update_weights(live, b_, filter);
  EXPECT_EQ(result.version, 1u);
  EXPECT_EQ(addresses(live), where);
  expect_unchanged(want, live);
  uint64_t slot_bytes = 0;
  for (const auto& [unit, bytes] : selected_slot_bytes(live.plan, experts)) slot_bytes += bytes;
  EXPECT_EQ(result.changed_bytes, slot_bytes);
  EXPECT_EQ(result.read_bytes, selected_tensor_bytes(live.plan, filter));
  // The live bytes are neither checkpoint's fresh load: the test can tell a whole-module reload
  // and a no-op apart.
  EXPECT_NE(snapshot(live), snapshot(fresh_a));
  EXPECT_NE(snapshot(live), snapshot(fresh_b));

  if (GetParam().quant == "fp8" && GetParam().activation.empty()) {
    // Static FP8: some rank's merged input scale moved with its experts (and the expected bytes
    // above say it is the maximum over the per-part scales, not whole-module bytes of B).
    const Snapshot a_bytes = snapshot(fresh_a);
    size_t moved = 0;
    for (size_t r = 0; r < live.ranks.size(); ++r) {
      for (const PlanParam& p : live.plan.ranks[r].params) {
        if (p.role == ParamRole::kInputScale && !param_equals(a_bytes, r, p, live)) {
          ++moved;
        }
      }
    }
    EXPECT_GT(moved, 0u);
  }

  // Back to A for the same experts: A's fresh load again, merged scales included.
  update_weights(live, a_, filter);
  expect_unchanged(snapshot(fresh_a), live);
}

TEST_P(ExpertUpdate, BoundedStagingGivesTheSameBytes) {
  const WeightFilter filter{.experts = {{1, 1}, {1, 3}}};
  LiveModel live = load_live(a_, parallel_);
  const Snapshot want = expected_bytes(load_live(a_, parallel_), load_live(b_, parallel_),
                                       {filter.experts.begin(), filter.experts.end()});
  UpdateOptions options;
  for (const auto& [unit, bytes] : selected_slot_bytes(live.plan, {filter.experts.begin(),
                                                                   filter.experts.end()})) {
    options.staging_bytes = std::max(options.staging_bytes, bytes);  // the largest unit
  }
  const UpdateResult result = update_weights(live, b_, filter, options);
  EXPECT_GT(result.groups, 1u);
  expect_unchanged(want, live);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ExpertUpdate,
    ::testing::Values(Case{"bf16_tp2ep2", "none", "", false, 2, 2, 0, false},
                      Case{"bf16_tp2ep2_redundant", "none", "", false, 2, 2, 2, false},
                      Case{"fp8static_tp2ep2_redundant", "fp8", "", false, 2, 2, 2, false},
                      Case{"fp8static_tp4ep2_redundant", "fp8", "", false, 4, 2, 2, false},
                      Case{"fp8static_tp2ep2_eplb", "fp8", "", false, 2, 2, 0, true},
                      Case{"fp8dynamic_tp2ep2_redundant", "fp8", "dynamic", false, 2, 2, 2, false},
                      Case{"quantizefp8_tp2ep2_redundant", "none", "", true, 2, 2, 2, false},
                      Case{"fp8block_tp2ep2_redundant", "fp8-block", "", false, 2, 2, 2, false}),
    [](const auto& info) { return info.param.name; });

// Filters by name keep their meaning: a substring naming one expert's tensors reloads the whole
// fused expert module of the ranks holding it (its merged scales need every part), and a filter
// that also names an expert reloads that module whole too.
TEST(ExpertUpdate, NameFiltersStillReloadTheWholeModule) {
  TempDir dir;
  const std::string a = make_model(dir, "qwen3_moe", 1, "fp8");
  const std::string b = make_model(dir, "qwen3_moe", 2, "fp8");
  const Snapshot fresh_a = snapshot(load_live(a, layout(2, 2)));
  const Snapshot fresh_b = snapshot(load_live(b, layout(2, 2)));
  for (const WeightFilter& filter :
       {WeightFilter{.substrings = {"layers.1.mlp.experts.3."}},
        WeightFilter{.substrings = {"layers.1.mlp.experts.3."}, .experts = {{1, 3}}},
        WeightFilter{.regex = "layers\\.1\\.mlp\\.experts\\.3\\.", .experts = {{1, 1}}}}) {
    LiveModel live = load_live(a, layout(2, 2));  // 8 experts: ep rank 0 holds 0-3
    update_weights(live, b, filter);
    for (size_t r = 0; r < live.ranks.size(); ++r) {
      for (const PlanParam& p : live.plan.ranks[r].params) {
        const bool whole = r == 0 && p.name.rfind("model.layers.1.mlp.experts.", 0) == 0;
        EXPECT_TRUE(param_equals(whole ? fresh_b : fresh_a, r, p, live))
            << "rank " << r << " " << p.name << " should hold the " << (whole ? "new" : "old")
            << " bytes";
      }
    }
  }
}

}  // namespace
}  // namespace shardload
