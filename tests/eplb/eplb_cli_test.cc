// Runs the real `shardload eplb` on load files written at test time: the JSON a user gets, and one
// `error: ` line with exit code 1 for every kind of bad file or layout.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run_command.h"
#include "shardload/eplb.h"
#include "temp_dir.h"
#include "test_paths.h"

namespace shardload {
namespace {

using ::shardload::testing::CommandResult;
using ::shardload::testing::run_command;
using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

constexpr const char* kReadmeLoad =
    R"({"expert_load": [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
                        [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]]})";

CommandResult eplb(const std::string& load_file, std::vector<std::string> layout) {
  std::vector<std::string> args = {testing::shardload_bin(), "eplb", "--load", load_file};
  args.insert(args.end(), layout.begin(), layout.end());
  return run_command(args);
}

const std::vector<std::string> kReadmeLayout = {"--replicas", "16", "--groups", "4",
                                                "--nodes",    "2",  "--gpus",   "8"};

void expect_one_line_error(const CommandResult& result, const std::string& what) {
  EXPECT_EQ(result.exit_code, 1) << what << ": " << result.err;
  EXPECT_TRUE(result.out.empty()) << what << ": " << result.out;
  ASSERT_FALSE(result.err.empty()) << what;
  EXPECT_EQ(result.err.rfind("error: ", 0), 0u) << what << ": " << result.err;
  EXPECT_EQ(result.err.find('\n'), result.err.size() - 1) << what << ": " << result.err;
}

TEST(EplbCliTest, ReadmeExample) {
  TempDir dir;
  write_file(dir.file("load.json"), std::string_view(kReadmeLoad));
  const CommandResult result = eplb(dir.file("load.json"), kReadmeLayout);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(result.err.empty()) << result.err;
  const nlohmann::json out = nlohmann::json::parse(result.out);
  EXPECT_EQ(out["physical_to_logical_map"],
            nlohmann::json::parse("[[5,6,5,7,8,4,3,4,10,9,10,2,0,1,11,1],"
                                  " [7,10,6,8,6,11,8,9,2,4,5,1,5,0,3,1]]"));
  EXPECT_EQ(out["logical_count"], nlohmann::json::parse("[[1,2,1,1,2,2,1,1,1,1,2,1],"
                                                        " [1,2,1,1,1,2,2,1,2,1,1,1]]"));
  // The replica order is the library's; the padded inverse must point back at each expert.
  const nlohmann::json& to_physical = out["logical_to_physical_map"];
  ASSERT_EQ(to_physical.size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    ASSERT_EQ(to_physical[l].size(), 12u);
    for (size_t e = 0; e < 12; ++e) {
      const int count = out["logical_count"][l][e].get<int>();
      ASSERT_EQ(to_physical[l][e].size(), 2u);
      for (int k = 0; k < 2; ++k) {
        const int slot = to_physical[l][e][k].get<int>();
        if (k < count) {
          EXPECT_EQ(out["physical_to_logical_map"][l][slot].get<size_t>(), e);
        } else {
          EXPECT_EQ(slot, -1);
        }
      }
    }
  }
  // And it is exactly what the library returns.
  const EplbInput in{
      .load = parse_expert_load(kReadmeLoad), .replicas = 16, .groups = 4, .nodes = 2, .gpus = 8};
  EXPECT_EQ(out, to_json(rebalance_experts(in)));
}

TEST(EplbCliTest, GroupsAndNodesDefaultToOne) {
  TempDir dir;
  write_file(dir.file("load.json"), std::string_view(R"({"expert_load": [[5, 5, 5, 5, 1, 1]]})"));
  const CommandResult result = eplb(dir.file("load.json"), {"--replicas", "8", "--gpus", "4"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json out = nlohmann::json::parse(result.out);
  EXPECT_EQ(out["physical_to_logical_map"], nlohmann::json::parse("[[2,4,3,5,0,0,1,1]]"));
  EXPECT_EQ(out["logical_count"], nlohmann::json::parse("[[2,2,1,1,1,1]]"));
}

TEST(EplbCliTest, BadFilesGiveOneErrorLine) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> files = {
      {"truncated", R"({"expert_load": [[1, 2, 3)"},
      {"empty", ""},
      {"not an object", "[[1, 2, 3, 4]]"},
      {"no member", R"({"load": [[1, 2, 3, 4]]})"},
      {"strings", R"({"expert_load": [["1", "2", "3", "4"]]})"},
      {"binary", std::string("\x00\xff\x01{", 4)},
      {"unequal rows", R"({"expert_load": [[1, 2, 3, 4], [1, 2]]})"},
      {"negative", R"({"expert_load": [[1, -2, 3, 4]]})"},
      {"overflowing", R"({"expert_load": [[1, 2, 3, 1e400]]})"},
      {"no layers", R"({"expert_load": []})"},
  };
  for (const auto& [what, text] : files) {
    write_file(dir.file("bad.json"), std::string_view(text));
    expect_one_line_error(eplb(dir.file("bad.json"), {"--replicas", "4", "--gpus", "4"}), what);
  }
  expect_one_line_error(eplb(dir.file("missing.json"), {"--replicas", "4", "--gpus", "4"}),
                        "missing");
  expect_one_line_error(eplb(dir.path().string(), {"--replicas", "4", "--gpus", "4"}), "directory");
}

TEST(EplbCliTest, BadLayoutsGiveOneErrorLine) {
  TempDir dir;
  write_file(dir.file("load.json"), std::string_view(kReadmeLoad));
  const CommandResult result = eplb(dir.file("load.json"), {"--replicas", "18", "--gpus", "8"});
  expect_one_line_error(result, "replicas not a multiple of gpus");
  EXPECT_NE(result.err.find("replicas 18 is not a multiple of gpus 8"), std::string::npos)
      << result.err;
  expect_one_line_error(eplb(dir.file("load.json"), {"--replicas", "8", "--gpus", "8"}),
                        "fewer replicas than experts");
  expect_one_line_error(eplb(dir.file("load.json"),
                             {"--replicas", "16", "--groups", "4", "--nodes", "2", "--gpus", "1"}),
                        "gpus not a multiple of nodes");
  expect_one_line_error(eplb(dir.file("load.json"),
                             {"--replicas", "16", "--groups", "8", "--nodes", "2", "--gpus", "8"}),
                        "experts not a multiple of groups");
  expect_one_line_error(
      eplb(dir.file("load.json"), {"--replicas", "16", "--nodes", "0", "--gpus", "8"}),
      "zero nodes");
}

TEST(EplbCliTest, MissingOptionsAreUsageErrors) {
  TempDir dir;
  write_file(dir.file("load.json"), std::string_view(kReadmeLoad));
  const CommandResult result = eplb(dir.file("load.json"), {"--gpus", "8"});
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_EQ(result.err.rfind("error: ", 0), 0u) << result.err;
  EXPECT_EQ(result.err.find('\n'), result.err.size() - 1) << result.err;
}

}  // namespace
}  // namespace shardload
