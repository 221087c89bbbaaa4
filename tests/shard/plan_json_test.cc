// Plan::to_json (what `shardload plan --json` prints) says of every parameter whether it is
// exported, its role and its module's post-processing, so that a reader can tell a model weight
// from the scale parts and float32 sources that only feed FP8 post-processing.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "shardload/checkpoint.h"
#include "shardload/plan.h"
#include "shardload/tiny.h"
#include "temp_dir.h"

namespace shardload {
namespace {

using nlohmann::json;
using ::shardload::testing::TempDir;

std::string make_model(const TempDir& dir, const std::string& quant) {
  TinyOptions options;
  options.arch = "qwen3_moe";
  options.out = dir.file("qwen3_moe-" + quant);
  options.seed = 3;
  options.quant = quant;
  make_tiny(options);
  return options.out;
}

// Per rank, every JSON parameter matches the plan's: name, role, exported, module and post.
void expect_json_matches_plan(const Plan& plan, const json& out) {
  ASSERT_EQ(out["ranks"].size(), plan.ranks.size());
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const json& params = out["ranks"][r]["params"];
    ASSERT_EQ(params.size(), plan.ranks[r].params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const PlanParam& param = plan.ranks[r].params[i];
      const json& p = params[i];
      EXPECT_EQ(p["name"], param.name);
      EXPECT_EQ(p["exported"], param.exported()) << param.name;
      EXPECT_EQ(p["module"], plan.modules[param.module].name) << param.name;
    }
  }
}

// Role -> post-processing names seen, over every rank's parameters.
std::map<std::string, std::set<std::string>> roles_and_posts(const json& out) {
  std::map<std::string, std::set<std::string>> seen;
  for (const json& rank : out["ranks"]) {
    for (const json& p : rank["params"]) {
      const std::string role = p["role"];
      const bool exported = role == "data" || role == "weight_scale" || role == "input_scale";
      EXPECT_EQ(p["exported"], exported) << p["name"];
      seen[role].insert(p["post"].get<std::string>());
    }
  }
  return seen;
}

TEST(PlanJson, StaticFp8NamesTheScalePartsAsInternal) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, "fp8"));
  ParallelConfig parallel;
  parallel.tp = 2;
  const Plan plan = make_plan(ckpt, parallel);
  const json out = plan.to_json(/*with_pieces=*/false);
  EXPECT_EQ(out["quantization"], "fp8");
  expect_json_matches_plan(plan, out);
  const auto seen = roles_and_posts(out);
  ASSERT_TRUE(seen.contains("weight_scale_parts"));
  EXPECT_EQ(seen.at("weight_scale_parts"), std::set<std::string>{"fp8_requantize"});
  EXPECT_TRUE(seen.contains("weight_scale"));
  EXPECT_TRUE(seen.at("data").contains("none"));  // norms, embeddings, the router
  EXPECT_FALSE(seen.contains("dynamic_source"));
}

TEST(PlanJson, DynamicFp8NamesTheFloatSourceAsInternal) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, "none"));
  ParallelConfig parallel;
  parallel.tp = 2;
  parallel.quantize_fp8 = true;
  const Plan plan = make_plan(ckpt, parallel);
  const json out = plan.to_json(/*with_pieces=*/false);
  EXPECT_EQ(out["quantization"], "fp8-dynamic");
  expect_json_matches_plan(plan, out);
  const auto seen = roles_and_posts(out);
  ASSERT_TRUE(seen.contains("dynamic_source"));
  EXPECT_EQ(seen.at("dynamic_source"), std::set<std::string>{"fp8_quantize"});
  EXPECT_FALSE(seen.contains("weight_scale_parts"));
}

TEST(PlanJson, UnquantizedParametersAreAllExportedData) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, "none"));
  const Plan plan = make_plan(ckpt, ParallelConfig{});
  const json out = plan.to_json(/*with_pieces=*/false);
  EXPECT_EQ(out["quantization"], "none");
  expect_json_matches_plan(plan, out);
  const auto seen = roles_and_posts(out);
  EXPECT_EQ(seen.size(), 1u);
  ASSERT_TRUE(seen.contains("data"));
  EXPECT_EQ(seen.at("data"), std::set<std::string>{"none"});
}

}  // namespace
}  // namespace shardload
