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
      const bool exported =
          role == "data" || role == "weight_scale" || role == "input_scale" || role == "weight_aux";
      EXPECT_EQ(p["exported"], exported) << p["name"];
      seen[role].insert(p["post"].get<std::string>());
    }
  }
  return seen;
}

// What a plan's JSON says: its quantization and the roles it names.
struct JsonRoles {
  std::string quantization;
  std::map<std::string, std::set<std::string>> roles;  // role -> post-processing names
};

// The tiny model planned at `tp` (dynamic FP8 when `quantize_fp8`), its JSON checked against
// the plan.
JsonRoles plan_roles(const std::string& quant, int tp, bool quantize_fp8) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, quant));
  ParallelConfig parallel;
  parallel.tp = tp;
  parallel.quantize_fp8 = quantize_fp8;
  const Plan plan = make_plan(ckpt, parallel);
  const json out = plan.to_json(/*with_pieces=*/false);
  expect_json_matches_plan(plan, out);
  return {out["quantization"], roles_and_posts(out)};
}

TEST(PlanJson, StaticFp8NamesTheScalePartsAsInternal) {
  const JsonRoles got = plan_roles("fp8", 2, false);
  EXPECT_EQ(got.quantization, "fp8");
  ASSERT_TRUE(got.roles.contains("weight_scale_parts"));
  EXPECT_EQ(got.roles.at("weight_scale_parts"), std::set<std::string>{"fp8_requantize"});
  EXPECT_TRUE(got.roles.contains("weight_scale"));
  EXPECT_TRUE(got.roles.at("data").contains("none"));  // norms, embeddings, the router
  EXPECT_FALSE(got.roles.contains("dynamic_source"));
}

TEST(PlanJson, DynamicFp8NamesTheFloatSourceAsInternal) {
  const JsonRoles got = plan_roles("none", 2, true);
  EXPECT_EQ(got.quantization, "fp8-dynamic");
  ASSERT_TRUE(got.roles.contains("dynamic_source"));
  EXPECT_EQ(got.roles.at("dynamic_source"), std::set<std::string>{"fp8_quantize"});
  EXPECT_FALSE(got.roles.contains("weight_scale_parts"));
}

TEST(PlanJson, UnquantizedParametersAreAllExportedData) {
  const JsonRoles got = plan_roles("none", 1, false);
  EXPECT_EQ(got.quantization, "none");
  EXPECT_EQ(got.roles.size(), 1u);
  ASSERT_TRUE(got.roles.contains("data"));
  EXPECT_EQ(got.roles.at("data"), std::set<std::string>{"none"});
}

}  // namespace
}  // namespace shardload
