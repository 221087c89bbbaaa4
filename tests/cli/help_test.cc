// What a newcomer sees first: `shardload` alone lists the commands, a line each, and every
// command's
// --help opens with one line of purpose and ends with one example.
#include <gtest/gtest.h>

#include <string>

#include "shardload_bin.h"

namespace shardload {
namespace {

using ::shardload::testing::CommandResult;
using ::shardload::testing::run_shardload;

constexpr const char* kCommands[] = {"inspect", "make-tiny", "plan",    "load",
                                     "export",  "eplb",      "support", "serve"};

TEST(Help, ShardloadAloneListsTheCommandsALineEach) {
  const CommandResult result = run_shardload({});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (const std::string command : kCommands) {
    const size_t at = result.out.find("\n  " + command + " ");
    ASSERT_NE(at, std::string::npos) << command << ":\n" << result.out;
    const std::string line = result.out.substr(at + 1, result.out.find('\n', at + 1) - at - 1);
    EXPECT_GT(line.size(), command.size() + 20) << "no purpose on the line: " << line;
  }
  EXPECT_NE(result.out.find("Example: shardload "), std::string::npos) << result.out;
}

TEST(Help, EveryCommandHasAPurposeLineAndAnExample) {
  for (const std::string command : kCommands) {
    const CommandResult result = run_shardload({command, "--help"});
    ASSERT_EQ(result.exit_code, 0) << command << ": " << result.err;
    const std::string first = result.out.substr(0, result.out.find('\n'));
    EXPECT_FALSE(first.empty() || first.starts_with("Usage")) << command << ":\n" << result.out;
    const std::string example = "\nExample: shardload " + command + " ";
    const size_t at = result.out.find(example);
    ASSERT_NE(at, std::string::npos) << command << ":\n" << result.out;
    EXPECT_EQ(result.out.find("Example:", at + example.size()), std::string::npos)
        << command << ": one example";
  }
}

}  // namespace
}  // namespace shardload
