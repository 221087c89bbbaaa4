// `shardload serve` exit codes: a usage error (a bad option value, an unknown option) exits 2 with
// one line naming the option, before anything is loaded; a data error (no such model) exits 1.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "serve_harness.h"

namespace shardload::testing {
namespace {

class HttpServeUsageTest : public OneModelTest<51> {
 protected:
  static std::vector<std::string> args(const std::string& name, std::vector<std::string> more) {
    std::vector<std::string> out = {model_, "--tp", "2",      "--ep", "2",
                                    "--name", name, "--port", "0"};
    out.insert(out.end(), more.begin(), more.end());
    return out;
  }

  // Runs the command, expects exit 2 and `option` named on stderr.
  static void expect_usage_error(const std::vector<std::string>& command,
                                 const std::string& option) {
    const FinishedRun run = run_to_exit(command);
    EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
    EXPECT_NE(run.err.find(option), std::string::npos) << run.err;
    EXPECT_EQ(run.out.find("listening"), std::string::npos) << run.out;
  }
};

TEST_F(HttpServeUsageTest, UsageErrorsExitTwoAndNameTheOption) {
  const std::string name = unique_name("usage");
  const ShmCleanup cleanup(name);
  expect_usage_error(args("a/b", {}), "--name");
  expect_usage_error(args("..", {}), "--name");
  expect_usage_error(args(name, {"--staging-bytes", "12Q"}), "--staging-bytes");
  expect_usage_error(args(name, {"--port", "70000"}), "--port");
  expect_usage_error(args(name, {"--port", "http"}), "--port");
  expect_usage_error(args(name, {"--host", "not an address"}), "--host");
  expect_usage_error(args(name, {"--api-key", ""}), "--api-key");
  expect_usage_error(args(name, {"--api-key", "has space"}), "--api-key");
  expect_usage_error(args(name, {"--no-such-option"}), "--no-such-option");
  EXPECT_FALSE(std::filesystem::exists(cleanup.dir()));

  // A data error, by contrast: no such model.
  std::vector<std::string> missing = args(name, {});
  missing[0] = models_->file("no-such-model");
  const FinishedRun run = run_to_exit(missing);
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_FALSE(std::filesystem::exists(cleanup.dir()));
}

TEST_F(HttpServeUsageTest, StagingBytesErrorNamesStagingBytesOnly) {
  const std::string name = unique_name("staging");
  const ShmCleanup cleanup(name);
  const FinishedRun run = run_to_exit(args(name, {"--staging-bytes", "lots"}));
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("--staging-bytes"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("--max-file-size"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace shardload::testing
