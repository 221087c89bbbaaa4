// The staging ring (src/device/staging_ring.h) with the host uploader: every family's ranks come
// out byte for byte as load_ranks gives them, through small windows that force many module
// boundaries and staging reuse; windows tile each rank; errors come back instead of crashing. Runs
// on every machine (no GPU needed): the CUDA uploader runs the same ring
// (tests/device/cuda_test.cc).
#include "device/staging_ring.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "load/direct_reader.h"
#include "shardload/device.h"
#include "shardload/error.h"
#include "shardload/loader.h"
#include "shardload/tiny.h"
#include "temp_dir.h"
#include "tiny_case.h"

namespace shardload {
namespace {

using ::shardload::testing::make_tiny_case;
using ::shardload::testing::TempDir;
using ::shardload::testing::tiny_case_name;
using ::shardload::testing::TinyCase;

// The models' values (make-tiny --seed).
constexpr uint64_t kSeed = 11;

// Loads through the ring into host buffers; returns them with their processed flags.
std::vector<RankWeights> ring_load(const Checkpoint& ckpt, const Plan& plan, uint64_t window_bytes,
                                   int depth, IoMode io = IoMode::kAuto) {
  std::vector<int> ranks;
  std::vector<RankWeights> out;
  std::vector<std::span<std::byte>> targets;
  for (const RankPlan& rank : plan.ranks) {
    ranks.push_back(rank.rank);
    out.push_back({rank.rank, AlignedBuffer(rank.bytes), {}});
  }
  // Garbage where the ring must write zeros: a device allocation starts uninitialised.
  for (RankWeights& w : out) {
    std::memset(w.buffer.data(), 0xA5, w.buffer.size());
    targets.push_back(w.buffer.span());
  }
  device::HostUploader uploader(targets);
  device::RingOptions options;
  options.window_bytes = window_bytes;
  options.depth = depth;
  options.threads = 2;
  options.io = io;
  std::vector<std::vector<uint8_t>> processed;
  device::RingStats stats;
  device::load_through_ring(ckpt, plan, ranks, uploader, options, processed, &stats);
  EXPECT_GT(stats.windows, 0u);
  for (size_t i = 0; i < out.size(); ++i) out[i].processed = processed[i];
  return out;
}

class RingFamilies : public ::testing::TestWithParam<TinyCase> {};

TEST_P(RingFamilies, RanksAreByteIdenticalToTheHostLoad) {
  const TinyCase& c = GetParam();
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_tiny_case(dir, c, kSeed));
  ParallelConfig parallel;
  parallel.tp = c.tp;
  parallel.ep = c.ep;
  const Plan plan = make_plan(ckpt, parallel);
  LoadOptions options;
  options.threads = 2;
  const std::vector<RankWeights> host = load_ranks(ckpt, plan, options);
  // 4 KiB windows: many windows, modules bigger than a window alone in one, two staging buffers
  // reused many times; then one window for everything.
  for (const uint64_t window : {uint64_t{4} << 10, uint64_t{1} << 30}) {
    const std::vector<RankWeights> ring = ring_load(ckpt, plan, window, 2);
    ASSERT_EQ(ring.size(), host.size());
    for (size_t r = 0; r < host.size(); ++r) {
      ASSERT_EQ(ring[r].buffer.size(), host[r].buffer.size());
      EXPECT_EQ(std::memcmp(ring[r].buffer.data(), host[r].buffer.data(), host[r].buffer.size()), 0)
          << "rank " << r << " window " << window;
      EXPECT_EQ(ring[r].processed, host[r].processed) << "rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, RingFamilies,
                         ::testing::Values(TinyCase{"llama", "none", "", 1, 1},
                                           TinyCase{"llama", "none", "", 4, 1},
                                           TinyCase{"qwen3_moe", "none", "", 4, 2},
                                           TinyCase{"llama", "fp8", "", 2, 1},
                                           TinyCase{"qwen3_moe", "fp8", "dynamic", 4, 2},
                                           TinyCase{"deepseek_v3", "fp8-block", "", 1, 1},
                                           TinyCase{"deepseek_v3", "fp8-block", "", 4, 2},
                                           TinyCase{"qwen3_moe", "ct-fp8-channel", "", 4, 2},
                                           TinyCase{"deepseek_v3", "ct-fp8-block", "", 4, 2},
                                           TinyCase{"llama", "ct-fp8-tensor", "", 2, 1}),
                         [](const auto& info) { return tiny_case_name(info.param); });

// O_DIRECT reads (the cold path) through many windows: the readers, kept across windows, give the
// same bytes.
TEST(StagingRing, ColdReadsGiveTheSameBytes) {
  TempDir dir;
  const std::string model = make_tiny_case(dir, {"deepseek_v3", "fp8-block", "", 4, 2}, kSeed);
  const Checkpoint ckpt = Checkpoint::open(model);
  const int fd = load::open_direct(ckpt.files()[0].path());
  if (fd < 0) GTEST_SKIP() << "this file system refuses O_DIRECT";
  ::close(fd);
  ParallelConfig parallel;
  parallel.tp = 4;
  parallel.ep = 2;
  const Plan plan = make_plan(ckpt, parallel);
  const std::vector<RankWeights> host = load_ranks(ckpt, plan);
  const std::vector<RankWeights> ring = ring_load(ckpt, plan, 16 << 10, 3, IoMode::kDirect);
  for (size_t r = 0; r < host.size(); ++r) {
    EXPECT_EQ(std::memcmp(ring[r].buffer.data(), host[r].buffer.data(), host[r].buffer.size()), 0)
        << "rank " << r;
  }
}

// A partial load in place (what a reload does on GPU ranks): the selected modules from another
// checkpoint, every other module's bytes kept, exactly as load_into gives on the host.
TEST(StagingRing, PartialLoadInPlaceMatchesLoadInto) {
  TempDir dir;
  TinyCase a{"qwen3_moe", "fp8", "", 4, 2};
  const Checkpoint first = Checkpoint::open(make_tiny_case(dir, a, kSeed));
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
  for (size_t m = 0; m < modules.size(); m += 3) modules[m] = true;  // runs with gaps between

  std::vector<RankWeights> host = load_ranks(first, plan);
  load_into(second, plan, host, modules);

  std::vector<RankWeights> ring = ring_load(first, plan, 8 << 10, 2);
  std::vector<int> ranks;
  std::vector<std::span<std::byte>> targets;
  std::vector<std::vector<uint8_t>> processed;
  for (RankWeights& w : ring) {
    ranks.push_back(w.rank);
    targets.push_back(w.buffer.span());
    processed.push_back(w.processed);
  }
  device::HostUploader uploader(targets);
  device::RingOptions options;
  options.window_bytes = 8 << 10;
  options.depth = 2;
  options.modules = modules;
  device::load_through_ring(second, plan, ranks, uploader, options, processed);
  for (size_t r = 0; r < host.size(); ++r) {
    EXPECT_EQ(std::memcmp(ring[r].buffer.data(), host[r].buffer.data(), host[r].buffer.size()), 0)
        << "rank " << r;
    EXPECT_EQ(processed[r], host[r].processed);
  }
  for (const device::Window& w : device::plan_windows(plan, ranks, 8 << 10, modules)) {
    for (uint32_t m = w.module_begin; m < w.module_end; ++m) EXPECT_TRUE(modules[m]) << m;
  }
}

TEST(PlanWindows, TileEachRankWithWholeModules) {
  TempDir dir;
  const Checkpoint ckpt =
      Checkpoint::open(make_tiny_case(dir, {"qwen3_moe", "none", "", 4, 2}, kSeed));
  ParallelConfig parallel;
  parallel.tp = 4;
  parallel.ep = 2;
  const Plan plan = make_plan(ckpt, parallel);
  const std::vector<int> ranks{3, 1};
  const uint64_t limit = 64 << 10;
  const std::vector<device::Window> windows = device::plan_windows(plan, ranks, limit);
  ASSERT_GT(windows.size(), 2u);
  std::vector<uint64_t> next(ranks.size(), 0);
  uint32_t module = 0;
  for (const device::Window& w : windows) {
    EXPECT_EQ(w.module_begin, module);
    EXPECT_GT(w.module_end, w.module_begin);
    module = w.module_end;
    // Over the limit only when a single module is.
    if (w.bytes > limit) {
      EXPECT_EQ(w.module_end - w.module_begin, 1u);
    }
    uint64_t staging = 0;
    for (const device::WindowSlice& s : w.slices) {
      const RankPlan& rank = plan.ranks[static_cast<size_t>(ranks[s.target])];
      EXPECT_EQ(s.begin, next[s.target]);
      next[s.target] = s.end;
      EXPECT_EQ(s.staging_offset % kParamAlignment, 0u);
      EXPECT_GE(s.staging_offset, staging);
      staging = s.staging_offset + (s.end - s.begin);
      for (size_t p = s.param_begin; p < s.param_end; ++p) {
        EXPECT_GE(rank.params[p].module, w.module_begin);
        EXPECT_LT(rank.params[p].module, w.module_end);
        EXPECT_GE(rank.params[p].offset, s.begin);
        EXPECT_LE(rank.params[p].offset + rank.params[p].nbytes, s.end);
      }
    }
    EXPECT_LE(staging, w.bytes);
  }
  EXPECT_EQ(module, plan.modules.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    EXPECT_EQ(next[i], plan.ranks[static_cast<size_t>(ranks[i])].bytes);
  }
}

TEST(StagingRing, UploadPastTheDestinationIsAnErrorNotACrash) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_tiny_case(dir, {"llama", "none", "", 1, 1}, kSeed));
  const Plan plan = make_plan(ckpt, ParallelConfig{});
  AlignedBuffer small(4096);
  device::HostUploader uploader({small.span()});
  std::vector<std::vector<uint8_t>> processed;
  device::RingOptions options;
  options.window_bytes = 8 << 10;
  try {
    device::load_through_ring(ckpt, plan, {0}, uploader, options, processed);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
  }
}

TEST(DeviceOptions, DeviceMapsParseAndFit) {
  EXPECT_EQ(parse_device_kind("cpu"), DeviceKind::kCpu);
  EXPECT_EQ(parse_device_kind("cuda"), DeviceKind::kCuda);
  EXPECT_THROW(parse_device_kind("gpu"), Error);
  EXPECT_EQ(parse_device_map(""), std::vector<int>{});
  EXPECT_EQ(parse_device_map("0,0,1,1"), (std::vector<int>{0, 0, 1, 1}));
  for (const char* bad : {",", "0,", "a", "0,-1", "1,,2", " 1"}) {
    EXPECT_THROW(parse_device_map(bad), Error) << bad;
  }
  EXPECT_EQ(assign_devices({0, 1, 2, 3, 4}, 2, {}), (std::vector<int>{0, 1, 0, 1, 0}));
  EXPECT_EQ(assign_devices({5, 6}, 8, {}), (std::vector<int>{5, 6}));
  EXPECT_EQ(assign_devices({0, 1}, 2, {1, 1}), (std::vector<int>{1, 1}));
  EXPECT_THROW(assign_devices({0, 1}, 2, {0}), Error);
  EXPECT_THROW(assign_devices({0, 1}, 2, {0, 2}), Error);
  std::array<char, 64> handle{};
  for (size_t i = 0; i < handle.size(); ++i) handle[i] = static_cast<char>(i * 37);
  EXPECT_EQ(ipc_handle_from_hex(ipc_handle_hex(handle)), handle);
  EXPECT_EQ(ipc_handle_hex(handle).size(), 128u);
  EXPECT_THROW(ipc_handle_from_hex("00"), Error);
  EXPECT_THROW(ipc_handle_from_hex(std::string(128, 'g')), Error);
}

// Without a GPU (every CI machine): a device load is Error(kDevice) saying why, never a crash.
TEST(DeviceLoad, WithoutAGpuIsADeviceError) {
  if (cuda_unavailable_reason().empty()) GTEST_SKIP() << "a GPU is usable here";
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_tiny_case(dir, {"llama", "none", "", 1, 1}, kSeed));
  const Plan plan = make_plan(ckpt, ParallelConfig{});
  try {
    load_ranks_to_device(ckpt, plan);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDevice);
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shardload
