// config.json as its producers spell it (src/model/config_fields.h kSpellings, docs/config_fields.md):
// transformers 5 writes num_local_experts for every MoE family and dtype for torch_dtype. A checkpoint
// whose config uses the other spelling of a field is the same model: inspect takes it, and its export
// has the same rank files, byte for byte, as the one with the spelling make-tiny writes. Two spellings
// of one field that disagree are refused, naming both.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "shardload_bin.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using ::shardload::testing::CommandResult;
using ::shardload::testing::read_file;
using ::shardload::testing::run_shardload;
using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

struct Case {
  std::string arch;
  std::string written;  // the name make-tiny writes
  std::string alias;    // another producer's name for it
  std::string ep;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.arch << " " << c.alias; }

// A tiny checkpoint of ARCH in DIR/NAME whose config.json is edited by `edit`.
std::string model(const TempDir& dir, const std::string& arch, const std::string& name,
                  void (*edit)(nlohmann::json&, const Case&), const Case& c) {
  TinyOptions options;
  options.arch = arch;
  options.out = dir.file(name);
  options.seed = 5;
  make_tiny(options);
  const std::string config_path = options.out + "/config.json";
  nlohmann::json config = nlohmann::json::parse(read_file(config_path));
  if (edit != nullptr) edit(config, c);
  write_file(config_path, config.dump(2));
  return options.out;
}

void rename_field(nlohmann::json& config, const Case& c) {
  ASSERT_TRUE(config.contains(c.written)) << c.written;
  config[c.alias] = config[c.written];
  config.erase(c.written);
}

// The rank files of `model` exported at tp 2 (and the case's ep), by name.
std::map<std::string, std::string> rank_files(const std::string& model, const std::string& ep) {
  const std::string out = model + "-export";
  const CommandResult result =
      run_shardload({"export", model, "--tp", "2", "--ep", ep, "--out", out});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  std::map<std::string, std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(out)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("model-rank-")) files[name] = read_file(entry.path().string());
  }
  return files;
}

class ConfigSpellings : public ::testing::TestWithParam<Case> {
 protected:
  TempDir dir_;
};

TEST_P(ConfigSpellings, AnotherSpellingIsTheSameModel) {
  const Case& c = GetParam();
  const std::string written = model(dir_, c.arch, "written", nullptr, c);
  const std::string aliased = model(dir_, c.arch, "aliased", rename_field, c);
  const CommandResult inspect = run_shardload({"inspect", "--summary", aliased});
  EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
  const std::map<std::string, std::string> want = rank_files(written, c.ep);
  const std::map<std::string, std::string> have = rank_files(aliased, c.ep);
  ASSERT_FALSE(want.empty());
  ASSERT_EQ(want.size(), have.size());
  for (const auto& [name, bytes] : want) {
    ASSERT_TRUE(have.contains(name)) << name;
    EXPECT_TRUE(have.at(name) == bytes) << name << " differs";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Aliases, ConfigSpellings,
    ::testing::Values(Case{"qwen3_moe", "num_experts", "num_local_experts", "2"},
                      Case{"qwen2_moe", "num_experts", "num_local_experts", "2"},
                      Case{"mixtral", "num_local_experts", "num_experts", "2"},
                      Case{"deepseek_v3", "n_routed_experts", "num_local_experts", "2"},
                      Case{"glm4_moe", "n_routed_experts", "num_local_experts", "2"},
                      Case{"deepseek_v32", "n_routed_experts", "num_local_experts", "2"},
                      Case{"glm4_moe_lite", "n_routed_experts", "num_local_experts", "2"},
                      Case{"glm_moe_dsa", "n_routed_experts", "num_local_experts", "2"},
                      Case{"minimax_m2", "num_local_experts", "num_experts", "2"},
                      Case{"llama4", "num_local_experts", "num_experts", "2"},
                      Case{"gpt_oss", "num_local_experts", "num_experts", "2"},
                      Case{"qwen3_next", "num_experts", "num_local_experts", "2"},
                      Case{"ernie4_5_moe", "moe_num_experts", "num_experts", "2"},
                      Case{"llama", "torch_dtype", "dtype", "1"}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return info.param.arch + "_" + info.param.alias;
    });

// Both spellings present: equal values are one field; different ones are refused by every command
// that reads the config, naming both spellings and both values.
TEST(ConfigSpellingsConflict, DisagreeingSpellingsAreRefusedNamingBoth) {
  const TempDir dir;
  const Case c{"qwen3_moe", "num_experts", "num_local_experts", "2"};
  const std::string agreeing = model(
      dir, c.arch, "agreeing",
      [](nlohmann::json& config, const Case&) { config["num_local_experts"] = config["num_experts"]; },
      c);
  EXPECT_EQ(run_shardload({"plan", agreeing, "--tp", "2", "--ep", "2"}).exit_code, 0);

  const std::string disagreeing = model(
      dir, c.arch, "disagreeing",
      [](nlohmann::json& config, const Case&) {
        config["num_local_experts"] = config["num_experts"].get<int>() * 2;
      },
      c);
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"plan", disagreeing, "--tp", "2", "--ep", "2"},
                                             {"inspect", disagreeing},
                                             {"load", disagreeing}}) {
    const CommandResult result = run_shardload(args);
    EXPECT_EQ(result.exit_code, 1) << args[0] << ": " << result.err;
    EXPECT_NE(result.err.find("two spellings of one field disagree"), std::string::npos)
        << args[0] << ": " << result.err;
    EXPECT_NE(result.err.find("num_experts"), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("num_local_experts"), std::string::npos) << result.err;
  }
}

}  // namespace
}  // namespace shardload
