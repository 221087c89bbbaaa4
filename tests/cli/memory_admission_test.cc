// Under a memory limit every command either runs or says, in one error line, what it needed and
// what the process could get: never an abort on an uncaught std::bad_alloc, never a bare
// "std::bad_alloc". The limit is an address-space limit (ulimit -v) set in the child shell.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "run_command.h"
#include "shardload/tiny.h"
#include "shardload_bin.h"
#include "temp_dir.h"
#include "test_paths.h"

// AddressSanitizer reserves terabytes of address space for its shadow memory at start-up: under
// ulimit -v an ASan build cannot even start, so these tests only run in builds without it.
#if defined(__SANITIZE_ADDRESS__)
#define SHARDLOAD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHARDLOAD_ASAN 1
#endif
#endif

namespace shardload {
namespace {

namespace fs = std::filesystem;
using ::shardload::testing::CommandResult;
using ::shardload::testing::run_command;
using ::shardload::testing::TempDir;

// Far below the 64 MiB model, far above what the programs map to start (about 20-30 MiB).
constexpr uint64_t kLimitKiB = 60 << 10;

// `shardload ARGS...` (or another program of the build) under ulimit -v kLimitKiB.
CommandResult limited(const std::string& program, const std::vector<std::string>& args) {
  std::string line = "ulimit -v " + std::to_string(kLimitKiB) + " && exec '" + program + "'";
  for (const std::string& arg : args) line += " '" + arg + "'";
  return run_command({"/bin/sh", "-c", line});
}

CommandResult limited(const std::vector<std::string>& args) { return limited(testing::shardload_bin(), args); }

std::string serve_bin() {
  return (fs::path(testing::shardload_bin()).parent_path() / "shardload-serve").string();
}

class MemoryAdmission : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef SHARDLOAD_ASAN
    GTEST_SKIP() << "built with AddressSanitizer, which cannot start under an address-space limit";
#endif
  }

  // A 64 MiB checkpoint: its one rank cannot fit under the limit.
  std::string model() {
    TinyOptions options;
    options.arch = "qwen3";
    options.out = dir_.file("model");
    options.seed = 3;
    options.size_bytes = uint64_t{64} << 20;
    make_tiny(options);
    return options.out;
  }

  TempDir dir_;
};

// The decimal number that follows the first `label` in `text`; 0 when there is none.
std::uint64_t number_after(const std::string& text, const std::string& label) {
  const std::size_t at = text.find(label);
  if (at == std::string::npos) return 0;
  std::uint64_t value = 0;
  for (std::size_t i = at + label.size(); i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    value = value * 10 + static_cast<std::uint64_t>(text[i] - '0');
  }
  return value;
}

// One error line, exit status 1, naming the bytes needed and the bytes left under the limit, the
// first larger than the second.
void expect_refused(const CommandResult& result, const std::string& what) {
  EXPECT_EQ(result.exit_code, 1) << what << ": " << result.err;
  EXPECT_EQ(result.err.rfind("error: ", 0), 0u) << what << ": " << result.err;
  EXPECT_EQ(result.err.find('\n'), result.err.size() - 1) << what << ": " << result.err;
  EXPECT_EQ(result.err.find("bad_alloc"), std::string::npos) << what << ": " << result.err;
  EXPECT_NE(result.err.find("address-space limit (ulimit -v) of " +
                            std::to_string(kLimitKiB * 1024) + " bytes"),
            std::string::npos)
      << what << ": " << result.err;
  // Plain parsing, not std::regex: g++ 12 at -O1 under ASan warns inside <regex> (maybe-uninitialized).
  const std::uint64_t needed = number_after(result.err, "need ");
  const std::uint64_t left = number_after(result.err, " leaves ");
  ASSERT_NE(needed, 0u) << what << ": " << result.err;
  EXPECT_GT(needed, left) << what << ": " << result.err;
}

TEST_F(MemoryAdmission, VersionAndHelpRunUnderATightLimit) {
  const CommandResult version = limited({"--version"});
  EXPECT_EQ(version.exit_code, 0) << version.err;
  EXPECT_EQ(version.out.rfind("shardload ", 0), 0u) << version.out;
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--help"}, {"load", "--help"}, {"serve", "--help"}}) {
    const CommandResult help = limited(args);
    EXPECT_EQ(help.exit_code, 0) << args[0] << ": " << help.err;
    EXPECT_NE(help.out.find("Usage:"), std::string::npos) << args[0] << ": " << help.out;
  }
  // A usage error is still one, whatever the limit.
  EXPECT_EQ(limited({"load"}).exit_code, 2);
}

TEST_F(MemoryAdmission, ALoadOrExportThatCannotFitSaysWhatItNeedsBeforeAllocating) {
  const std::string checkpoint = model();
  expect_refused(limited({"load", checkpoint}), "load");
  expect_refused(limited({"load", checkpoint, "--rank", "0", "--io", "pread"}), "load --io pread");
  expect_refused(limited({"export", checkpoint, "--out", dir_.file("export")}), "export");
  // Nothing was written: no export, no staging directory beside it.
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_.path())) {
    EXPECT_EQ(entry.path().filename(), "model") << entry.path();
  }
  // An export loads with its rank files' sizes known from their headers.
  const CommandResult exported =
      ::shardload::testing::run_shardload({"export", checkpoint, "--out", dir_.file("export")});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  expect_refused(limited({"load", dir_.file("export")}), "load of an export");
}

TEST_F(MemoryAdmission, AServerThatCannotFitSaysSoBeforeMakingItsSharedMemory) {
  const std::string checkpoint = model();
  const std::string name = "admission-test-" + std::to_string(::getpid());
  const CommandResult served =
      limited(serve_bin(), {checkpoint, "--name", name, "--port", "0"});
  expect_refused(served, "serve");
  EXPECT_NE(served.err.find("rank files"), std::string::npos) << served.err;
  EXPECT_FALSE(fs::exists("/dev/shm/shardload-" + name));
}

// An allocation that no admission foresees (here the generator's file buffers) is one error line
// saying out of memory, with the limit, not an abort.
TEST_F(MemoryAdmission, AnAllocationThatFailsAnywhereIsOneErrorLine) {
  const CommandResult made = limited({"make-tiny", "--arch", "qwen3", "--size", "200000000",
                                      "--out", dir_.file("big")});
  EXPECT_EQ(made.exit_code, 1) << made.err;
  EXPECT_EQ(made.err.rfind("error: out of memory", 0), 0u) << made.err;
  EXPECT_EQ(made.err.find('\n'), made.err.size() - 1) << made.err;
  EXPECT_NE(made.err.find("address-space limit"), std::string::npos) << made.err;
}

}  // namespace
}  // namespace shardload
