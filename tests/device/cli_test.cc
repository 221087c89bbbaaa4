// `load --device`: a machine without a usable GPU answers --device cuda with a clear error (exit
// 1), never a crash; bad values are usage errors (exit 2). The GPU side is in cuda_test.cc.
#include <gtest/gtest.h>

#include "shardload/device.h"
#include "shardload_bin.h"

namespace shardload {
namespace {

using namespace ::shardload::testing;

TEST(LoadDevice, CudaWithoutAGpuIsAnErrorNotACrash) {
  if (cuda_unavailable_reason().empty()) GTEST_SKIP() << "a GPU is usable here";
  TempDir dir;
  const std::string model = make_tiny_model(dir, "qwen3_moe", 1);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"load", model, "--device", "cuda"},
        std::vector<std::string>{"load", model, "--device", "cuda", "--tp", "2", "--checksum"}}) {
    const CommandResult r = run_shardload(args);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("--device cuda: "), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST(LoadDevice, BadDeviceFlagsAreUsageErrors) {
  TempDir dir;
  const std::string model = make_tiny_model(dir, "llama", 1);
  CommandResult r = run_shardload({"load", model, "--device", "gpu"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  r = run_shardload({"load", model, "--device-map", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--device-map needs --device cuda"), std::string::npos) << r.err;
  r = run_shardload({"load", model, "--device", "cpu"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace
}  // namespace shardload
