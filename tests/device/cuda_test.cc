// Device tests (ctest label `device`): ranks loaded onto a GPU are byte for byte the host load's,
// for every weight format and for tp 1 and tp 4 x ep 2 on one GPU. Without a usable GPU each test
// says why and is skipped (bench/gpu/run_device_checks.sh runs them on a GPU machine).
#include <gtest/gtest.h>

#include <cstring>

#include "shardload/device.h"
#include "shardload/error.h"
#include "shardload/loader.h"
#include "shardload/tiny.h"
#include "shardload_bin.h"
#include "temp_dir.h"
#include "tiny_case.h"

namespace shardload {
namespace {

using ::shardload::testing::make_tiny_case;
using ::shardload::testing::run_shardload;
using ::shardload::testing::TempDir;
using ::shardload::testing::tiny_case_name;
using ::shardload::testing::TinyCase;

#define SKIP_WITHOUT_GPU()                                    \
  do {                                                        \
    const std::string why = cuda_unavailable_reason();        \
    if (!why.empty()) GTEST_SKIP() << "needs a GPU: " << why; \
  } while (false)

// The models' values (make-tiny --seed).
constexpr uint64_t kSeed = 3;

class DeviceFamilies : public ::testing::TestWithParam<TinyCase> {};

TEST_P(DeviceFamilies, DeviceRanksAreByteIdenticalToTheHostLoad) {
  SKIP_WITHOUT_GPU();
  const TinyCase& c = GetParam();
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_tiny_case(dir, c, kSeed));
  ParallelConfig parallel;
  parallel.tp = c.tp;
  parallel.ep = c.ep;
  const Plan plan = make_plan(ckpt, parallel);
  const std::vector<RankWeights> host = load_ranks(ckpt, plan);
  for (const uint64_t window : {uint64_t{16} << 10, uint64_t{128} << 20}) {
    DeviceLoadOptions device;
    device.window_bytes = window;
    device.device_map.assign(plan.ranks.size(), 0);  // every rank on GPU 0
    const std::vector<DeviceRankWeights> ranks = load_ranks_to_device(ckpt, plan, {}, device);
    ASSERT_EQ(ranks.size(), host.size());
    for (size_t r = 0; r < host.size(); ++r) {
      EXPECT_EQ(ranks[r].buffer.device(), 0);
      ASSERT_EQ(ranks[r].buffer.size(), host[r].buffer.size());
      AlignedBuffer back(host[r].buffer.size());
      ranks[r].buffer.copy_to_host(0, back.span());
      EXPECT_EQ(std::memcmp(back.data(), host[r].buffer.data(), back.size()), 0)
          << "rank " << r << " window " << window;
      EXPECT_EQ(ranks[r].processed, host[r].processed);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, DeviceFamilies,
                         ::testing::Values(TinyCase{"qwen3_moe", "none", "", 1, 1},
                                           TinyCase{"qwen3_moe", "none", "", 4, 2},
                                           TinyCase{"llama", "fp8", "", 1, 1},
                                           TinyCase{"qwen3_moe", "fp8", "", 4, 2},
                                           TinyCase{"qwen3_moe", "fp8", "dynamic", 4, 2},
                                           TinyCase{"deepseek_v3", "fp8-block", "", 1, 1},
                                           TinyCase{"deepseek_v3", "fp8-block", "", 4, 2},
                                           TinyCase{"qwen3_moe", "ct-fp8-channel", "", 4, 2},
                                           TinyCase{"deepseek_v3", "ct-fp8-block", "", 4, 2},
                                           TinyCase{"llama", "ct-fp8-tensor", "", 2, 1}),
                         [](const auto& info) { return tiny_case_name(info.param); });

// The command line: --checksum of a GPU load hashes the bytes copied back from the GPUs; they match
// the host load's, for a model and for its export.
TEST(LoadCommand, DeviceChecksumsEqualTheHostLoad) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string model = make_tiny_case(dir, {"qwen3_moe", "fp8", "", 4, 2}, kSeed);
  const auto checksums = [](std::vector<std::string> args) {
    const auto r = run_shardload(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out.substr(0, r.out.rfind("loaded"));
  };
  const std::string host = checksums({"load", model, "--tp", "4", "--ep", "2", "--checksum"});
  EXPECT_NE(host, "");
  EXPECT_EQ(checksums({"load", model, "--tp", "4", "--ep", "2", "--checksum", "--device", "cuda",
                       "--device-map", "0,0,0,0"}),
            host);
  const auto exported =
      run_shardload({"export", model, "--tp", "4", "--ep", "2", "--out", dir.file("export")});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_EQ(checksums({"load", dir.file("export"), "--checksum", "--device", "cuda"}),
            checksums({"load", dir.file("export"), "--checksum"}));
}

// A reload in place on GPU ranks: the selected modules of another checkpoint, the same allocations.
TEST(DeviceLoad, PartialLoadInPlaceMatchesLoadInto) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  const Checkpoint first =
      Checkpoint::open(make_tiny_case(dir, {"qwen3_moe", "fp8", "", 4, 2}, kSeed));
  TinyOptions other;
  other.arch = "qwen3_moe";
  other.quant = "fp8";
  other.seed = 99;
  other.out = dir.file("second");
  make_tiny(other);
  const Checkpoint second = Checkpoint::open(other.out);
  ParallelConfig parallel;
  parallel.tp = 4;
  parallel.ep = 2;
  const Plan plan = make_plan(first, parallel);
  std::vector<bool> modules(plan.modules.size(), false);
  for (size_t m = 1; m < modules.size(); m += 2) modules[m] = true;
  std::vector<RankWeights> host = load_ranks(first, plan);
  load_into(second, plan, host, modules);
  DeviceLoadOptions device;
  device.device_map.assign(plan.ranks.size(), 0);
  std::vector<DeviceRankWeights> ranks = load_ranks_to_device(first, plan, {}, device);
  std::vector<uint64_t> addresses;
  for (const DeviceRankWeights& w : ranks) addresses.push_back(w.buffer.address());
  load_into_device(second, plan, ranks, modules, {}, device);
  for (size_t r = 0; r < host.size(); ++r) {
    EXPECT_EQ(ranks[r].buffer.address(), addresses[r]);
    AlignedBuffer back(host[r].buffer.size());
    ranks[r].buffer.copy_to_host(0, back.span());
    EXPECT_EQ(std::memcmp(back.data(), host[r].buffer.data(), back.size()), 0) << "rank " << r;
    EXPECT_EQ(ranks[r].processed, host[r].processed);
  }
}

TEST(DeviceBuffer, CopiesAndIpcHandle) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer buffer(0, 1 << 20);
  std::vector<std::byte> in(1 << 20), out(1 << 20);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::byte>(i * 7);
  buffer.copy_from_host(0, in);
  buffer.copy_to_host(0, out);
  EXPECT_EQ(in, out);
  const std::array<char, 64> handle = buffer.ipc_handle();
  EXPECT_NE(handle, (std::array<char, 64>{}));
  EXPECT_THROW(buffer.copy_to_host(1, out), Error);
  const std::vector<DeviceBuffer> up = upload_buffers({std::span<const std::byte>(in)}, {0});
  up[0].copy_to_host(0, out);
  EXPECT_EQ(in, out);
}

TEST(DeviceBuffer, NoSuchGpuIsADeviceError) {
  SKIP_WITHOUT_GPU();
  try {
    DeviceBuffer buffer(cuda_device_count(), 16);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDevice);
  }
}

}  // namespace
}  // namespace shardload
