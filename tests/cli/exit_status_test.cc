// Usage errors exit 2, whatever machine they are made on: a malformed or wrong-length --device-map
// used to exit 1 (on a machine without a GPU the missing GPU was reported first, and serve checked
// the length only while loading). `serve EXPORT` says what the directory is, as `plan` does, instead
// of the checkpoint reader's complaint about its files; make-tiny --size takes the K/M/G suffixes
// the other size flags take.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "shardload/serve.h"
#include "shardload_bin.h"
#include "test_paths.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using ::shardload::testing::CommandResult;
using ::shardload::testing::run_command;
using ::shardload::testing::run_shardload;
using ::shardload::testing::TempDir;

// A name no other test or parallel run uses.
std::string server_name(const char* what) {
  return std::string("exit-status-") + what + "-" + std::to_string(getpid());
}

// `timeout`: a server that wrongly starts fails the test instead of hanging it.
CommandResult serve(const std::string& name, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/timeout", "120", testing::shardload_bin(), "serve"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--port", "0", "--name", name});
  return run_command(argv);
}

// One `error: ` line naming `needle`, and exit status 2.
void expect_usage_error(const CommandResult& result, const std::string& needle,
                        const std::string& what) {
  EXPECT_EQ(result.exit_code, 2) << what << ": " << result.err;
  EXPECT_EQ(result.err.rfind("error: ", 0), 0u) << what << ": " << result.err;
  EXPECT_EQ(result.err.find('\n'), result.err.size() - 1) << what << ": " << result.err;
  EXPECT_NE(result.err.find(needle), std::string::npos) << what << ": " << result.err;
}

TEST(ExitStatus, AMalformedOrWrongLengthDeviceMapIsAUsageError) {
  TempDir dir;
  const std::string model = ::shardload::testing::make_tiny_model(dir, "qwen3_moe", 1);
  const std::string e = dir.file("e");
  ASSERT_EQ(run_shardload({"export", model, "--tp", "4", "--out", e}).exit_code, 0);
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"malformed", {"load", model, "--tp", "2", "--device", "cuda", "--device-map", "0,x"}},
      {"negative", {"load", model, "--tp", "2", "--device", "cuda", "--device-map", "-1,0"}},
      {"too long", {"load", model, "--tp", "2", "--device", "cuda", "--device-map", "0,0,0"}},
      {"too short for --rank", {"load", model, "--tp", "2", "--rank", "1", "--device", "cuda",
                                "--device-map", "0,0"}},
      {"too short for an export", {"load", e, "--device", "cuda", "--device-map", "0,0"}},
  };
  for (const auto& [what, args] : cases)
    expect_usage_error(run_shardload(args), "--device-map", what);

  const std::string name = server_name("device-map");
  expect_usage_error(serve(name, {model, "--tp", "2", "--device", "cuda", "--device-map", "0"}),
                     "--device-map", "serve, too short");
  expect_usage_error(serve(name, {model, "--tp", "2", "--device", "cuda", "--device-map", "0;1"}),
                     "--device-map", "serve, malformed");
  EXPECT_FALSE(fs::exists(shm_dir(name)));
}

TEST(ExitStatus, ServeGivenAnExportSaysItIsOne) {
  TempDir dir;
  const std::string model = ::shardload::testing::make_tiny_model(dir, "qwen3_moe", 1);
  const std::string e = dir.file("e");
  ASSERT_EQ(run_shardload({"export", model, "--tp", "4", "--out", e}).exit_code, 0);
  const std::string name = server_name("export");
  const CommandResult result = serve(name, {e});
  expect_usage_error(result, "is a shardload export", "serve EXPORT");
  EXPECT_NE(result.err.find("shardload load"), std::string::npos) << result.err;
  EXPECT_EQ(result.err.find("no model.safetensors.index.json"), std::string::npos) << result.err;
  EXPECT_FALSE(fs::exists(shm_dir(name)));
}

TEST(ExitStatus, MakeTinySizeTakesByteSuffixes) {
  TempDir dir;
  const CommandResult suffixed =
      run_shardload({"make-tiny", "--arch", "llama", "--size", "2M", "--out", dir.file("m")});
  ASSERT_EQ(suffixed.exit_code, 0) << suffixed.err;
  const CommandResult plain = run_shardload(
      {"make-tiny", "--arch", "llama", "--size", "2097152", "--out", dir.file("bytes")});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  // The same size, said two ways: the same checkpoint.
  const auto summary = [](const std::string& out) { return out.substr(out.find(':')); };
  EXPECT_EQ(summary(suffixed.out), summary(plain.out));
  EXPECT_EQ(run_shardload({"make-tiny", "--arch", "llama", "--size", "0", "--out", dir.file("z")})
                .exit_code,
            0);
  const CommandResult bad =
      run_shardload({"make-tiny", "--arch", "llama", "--size", "150Q", "--out", dir.file("q")});
  expect_usage_error(bad, "--size", "a size with an unknown suffix");
  EXPECT_NE(bad.err.find("150Q"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(dir.file("q")));
}

}  // namespace
}  // namespace shardload
