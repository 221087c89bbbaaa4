// The command line reads JSON files a user names (expert maps, load statistics): 120 KB of nested
// arrays used to crash both readers. Each is now one `error:` line and exit code 1.
#include <gtest/gtest.h>

#include <string>

#include "run_command.h"
#include "shardload/tiny.h"
#include "shardload_bin.h"
#include "temp_dir.h"

namespace shardload {
namespace {

using ::shardload::testing::CommandResult;
using ::shardload::testing::run_shardload;
using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

std::string deep_json(const std::string& member) {
  return "{\"" + member + "\": " + std::string(60000, '[') + std::string(60000, ']') + "}";
}

void expect_clean_error(const CommandResult& result) {
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_EQ(result.err.rfind("error: ", 0), 0u) << result.err;
  EXPECT_NE(result.err.find("nested too deeply"), std::string::npos) << result.err;
  EXPECT_EQ(result.err.find('\n'), result.err.size() - 1) << "one line: " << result.err;
}

TEST(HostileJson, EplbRefusesDeeplyNestedLoadStatistics) {
  TempDir dir;
  write_file(dir.file("load.json"), deep_json("expert_load"));
  expect_clean_error(
      run_shardload({"eplb", "--load", dir.file("load.json"), "--replicas", "8", "--gpus", "2"}));
}

TEST(HostileJson, PlanRefusesADeeplyNestedExpertMap) {
  TempDir dir;
  const std::string model =
      ::shardload::testing::make_tiny_model(dir, "qwen3_moe", TinyOptions{}.seed);
  write_file(dir.file("map.json"), deep_json("physical_to_logical_map"));
  expect_clean_error(run_shardload(
      {"plan", model, "--tp", "2", "--ep", "2", "--expert-map", dir.file("map.json")}));
}

}  // namespace
}  // namespace shardload
