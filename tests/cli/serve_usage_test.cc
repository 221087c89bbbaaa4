// `shardload serve` usage errors exit 2 before anything starts, as every other command's do: a
// layout the model cannot take and an unknown --shm-group used to exit 1 (or, for the group, only
// after the checkpoint had been read).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "run_command.h"
#include "shardload/serve.h"
#include "shardload/tiny.h"
#include "temp_dir.h"
#include "test_paths.h"

namespace shardload {
namespace {

using ::shardload::testing::CommandResult;
using ::shardload::testing::run_command;
using ::shardload::testing::TempDir;

// `timeout`: a server that wrongly starts fails the test instead of hanging it.
CommandResult serve_model(const std::string& model, const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"/usr/bin/timeout", "120", testing::shardload_bin(), "serve",     model,
                                   "--port",           "0",   "--name",      "usage-test"};
  args.insert(args.end(), flags.begin(), flags.end());
  return run_command(args);
}

TEST(ServeUsage, LayoutsTheModelCannotTakeAndUnknownGroupsExitTwo) {
  TempDir dir;
  TinyOptions options;
  options.arch = "qwen3_moe";
  options.out = dir.file("model");
  make_tiny(options);
  for (const std::vector<std::string>& flags : {std::vector<std::string>{"--tp", "0"},
                                                {"--tp", "3"},
                                                {"--tp", "4", "--ep", "3"},
                                                {"--shm-group", "no-such-group-here"}}) {
    const CommandResult result = serve_model(options.out, flags);
    EXPECT_EQ(result.exit_code, 2) << flags[0] << " " << flags[1] << ": " << result.err;
    EXPECT_EQ(result.err.rfind("error: ", 0), 0u) << result.err;
  }
  // A model that is not there is bad data, not bad usage.
  EXPECT_EQ(serve_model(dir.file("absent"), {}).exit_code, 1);
  EXPECT_FALSE(std::filesystem::exists(shm_dir("usage-test")));
}

}  // namespace
}  // namespace shardload
