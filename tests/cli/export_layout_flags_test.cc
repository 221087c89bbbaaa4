// `shardload load EXPORT` with layout flags whose meaning depends on tp, given without --tp: they
// are resolved against the export's tp, not the default tp of 1. --moe-dense-tp-size 1 on an export
// without replicated dense MLPs used to pass unnoticed, and the legal --moe-dense-tp-size 4 on a tp-4
// export was refused with a message about --tp 1.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardload_bin.h"

namespace shardload {
namespace {

using ::shardload::testing::CommandResult;
using ::shardload::testing::run_shardload;
using ::shardload::testing::TempDir;

class ExportLayoutFlags : public ::testing::Test {
 protected:
  void SetUp() override {
    // deepseek_v3 has dense layers before its MoE layers: --moe-dense-tp-size 1 changes the export.
    model_ = ::shardload::testing::make_tiny_model(dir_, "deepseek_v3", 3);
  }

  // An export of the model with `flags`, at DIR/NAME.
  std::string exported(const std::string& name, std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"export", model_, "--out", dir_.file(name)});
    const CommandResult result = run_shardload(flags);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    return dir_.file(name);
  }

  TempDir dir_;
  std::string model_;
};

void expect_loads(const std::string& dir, const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"load", dir};
  args.insert(args.end(), flags.begin(), flags.end());
  const CommandResult result = run_shardload(args);
  EXPECT_EQ(result.exit_code, 0) << flags.front() << " " << flags.back() << ": " << result.err;
  EXPECT_EQ(result.out.rfind("loaded export", 0), 0u) << result.out;
}

// Refused as a usage error naming the export's scopes, not the --tp.
void expect_refused(const std::string& dir, const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"load", dir};
  args.insert(args.end(), flags.begin(), flags.end());
  const CommandResult result = run_shardload(args);
  EXPECT_EQ(result.exit_code, 2) << flags.front() << " " << flags.back() << ": " << result.err;
  EXPECT_NE(result.err.find("scopes"), std::string::npos) << result.err;
  EXPECT_EQ(result.err.find("--tp 1"), std::string::npos) << result.err;
}

TEST_F(ExportLayoutFlags, MoeDenseTpSizeIsResolvedAgainstTheExportsTp) {
  const std::string plain = exported("plain", {"--tp", "4"});
  const std::string replicated = exported("replicated", {"--tp", "4", "--moe-dense-tp-size", "1"});
  expect_loads(plain, {"--moe-dense-tp-size", "4"});
  expect_refused(plain, {"--moe-dense-tp-size", "1"});
  expect_loads(replicated, {"--moe-dense-tp-size", "1"});
  expect_refused(replicated, {"--moe-dense-tp-size", "4"});
  // With --tp given, as before.
  expect_loads(plain, {"--tp", "4", "--moe-dense-tp-size", "4"});
  expect_refused(plain, {"--tp", "4", "--moe-dense-tp-size", "1"});
}

TEST_F(ExportLayoutFlags, ExpertParallelFlagsTakeTheExportsTp) {
  const std::string ep4 = exported("ep4", {"--tp", "4", "--ep", "4"});
  expect_loads(ep4, {"--enable-expert-parallel", "--ep", "4"});
  expect_loads(ep4, {"--enable-expert-parallel"});
  const std::string deepep = exported("deepep", {"--tp", "4", "--moe-a2a-backend", "deepep"});
  expect_loads(deepep, {"--moe-a2a-backend", "deepep", "--ep", "4"});
}

}  // namespace
}  // namespace shardload
