// A rank straight into tensors of their own (load_rank_into_tensors), as an engine holds its
// parameters: every parameter's bytes are load_ranks' byte for byte, FP8 post-processing included,
// through windows far smaller than the rank (the host memory the load holds); a parameter without a
// destination is left alone; a destination that does not fit is refused before anything is written.
// Host destinations run on every machine; GPU ones run the same ring with the CUDA uploader.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

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
using ::shardload::testing::TinyCase;

constexpr std::byte kUnwritten{0xA5};

// The models' values (make-tiny --seed).
constexpr uint64_t kSeed = 23;

Plan plan_of(const Checkpoint& ckpt, int tp, int ep) {
  ParallelConfig parallel;
  parallel.tp = tp;
  parallel.ep = ep;
  return make_plan(ckpt, parallel);
}

// One buffer per parameter, as an engine's tensors are, each full of kUnwritten.
std::map<std::string, std::vector<std::byte>> tensors_of(const RankPlan& rank) {
  std::map<std::string, std::vector<std::byte>> out;
  for (const PlanParam& p : rank.params) out[p.name].assign(p.nbytes, kUnwritten);
  return out;
}

std::vector<TensorDestination> host_destinations(
    std::map<std::string, std::vector<std::byte>>& tensors) {
  std::vector<TensorDestination> out;
  for (auto& [name, bytes] : tensors) {
    out.push_back({name, -1, reinterpret_cast<uint64_t>(bytes.data()), bytes.size()});
  }
  return out;
}

bool same_bytes(const std::vector<std::byte>& tensor, const RankWeights& rank,
                const PlanParam& param) {
  return std::memcmp(tensor.data(), rank.buffer.data() + param.offset, param.nbytes) == 0;
}

class TensorDestinations : public ::testing::TestWithParam<TinyCase> {};

TEST_P(TensorDestinations, EveryParameterIsTheHostLoadsBytesThroughSmallWindows) {
  const TinyCase& c = GetParam();
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_tiny_case(dir, c, kSeed));
  const Plan plan = plan_of(ckpt, c.tp, c.ep);
  const std::vector<RankWeights> reference = load_ranks(ckpt, plan);
  for (const RankPlan& rank : plan.ranks) {
    auto tensors = tensors_of(rank);
    DeviceLoadOptions ring;
    ring.window_bytes = 4096;  // a module or a few per window: many windows, staging reused
    ring.depth = 2;
    LoadOptions options;
    options.threads = 2;
    TensorLoadStats stats;
    load_rank_into_tensors(ckpt, plan, rank.rank, host_destinations(tensors), options, ring,
                           &stats);
    const RankWeights& expected = reference[static_cast<size_t>(rank.rank)];
    for (const PlanParam& p : rank.params) {
      EXPECT_TRUE(same_bytes(tensors.at(p.name), expected, p))
          << "rank " << rank.rank << " " << p.name;
    }
    uint64_t params_bytes = 0;
    for (const PlanParam& p : rank.params) params_bytes += p.nbytes;
    EXPECT_EQ(stats.bytes_copied, params_bytes);
    EXPECT_GT(stats.windows, 1u);
    // The host memory the load held: the ring's buffers, not a rank's worth.
    EXPECT_LT(stats.staging_bytes, rank.bytes) << "rank " << rank.rank;
    EXPECT_GT(stats.bytes_read, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, TensorDestinations,
                         ::testing::Values(TinyCase{"qwen3_moe", "none", "", 4, 2},
                                           TinyCase{"qwen3_moe", "fp8", "", 2, 2},
                                           TinyCase{"mixtral", "fp8", "dynamic", 2, 1},
                                           TinyCase{"deepseek_v3", "fp8-block", "", 2, 2},
                                           TinyCase{"llama", "ct-fp8-tensor", "", 2, 1},
                                           TinyCase{"qwen3", "none", "", 4, 1}));

// Some parameters only (an engine's scratch for the others): those are written, the others' bytes
// are neither needed nor touched.
TEST(TensorDestinationsSome, AParameterWithoutADestinationIsLeftAlone) {
  TempDir dir;
  const Checkpoint ckpt =
      Checkpoint::open(make_tiny_case(dir, {"qwen3_moe", "fp8", "", 2, 2}, kSeed));
  const Plan plan = plan_of(ckpt, 2, 2);
  const std::vector<RankWeights> reference = load_ranks(ckpt, plan);
  const RankPlan& rank = plan.ranks[1];
  auto tensors = tensors_of(rank);
  std::vector<TensorDestination> every = host_destinations(tensors);
  std::vector<TensorDestination> some;
  for (size_t i = 0; i < every.size(); i += 2) some.push_back(every[i]);
  load_rank_into_tensors(ckpt, plan, rank.rank, some);
  std::map<std::string, bool> given;
  for (const TensorDestination& d : some) given[d.name] = true;
  for (const PlanParam& p : rank.params) {
    const std::vector<std::byte>& t = tensors.at(p.name);
    if (given.contains(p.name)) {
      EXPECT_TRUE(same_bytes(t, reference[1], p)) << p.name;
    } else {
      EXPECT_EQ(std::count(t.begin(), t.end(), kUnwritten), static_cast<long>(t.size())) << p.name;
    }
  }
}

ErrorKind refused(const Checkpoint& ckpt, const Plan& plan, int rank,
                  const std::vector<TensorDestination>& destinations, std::string* tensor) {
  try {
    load_rank_into_tensors(ckpt, plan, rank, destinations);
  } catch (const Error& e) {
    *tensor = e.tensor();
    return e.kind();
  }
  ADD_FAILURE() << "no error";
  return ErrorKind::kIo;
}

// Each destination that does not fit is named, and nothing is written (every check comes first).
TEST(TensorDestinationsSome, ADestinationThatDoesNotFitIsRefusedBeforeAnythingIsWritten) {
  TempDir dir;
  const Checkpoint ckpt =
      Checkpoint::open(make_tiny_case(dir, {"qwen3_moe", "none", "", 2, 1}, kSeed));
  const Plan plan = plan_of(ckpt, 2, 1);
  const RankPlan& rank = plan.ranks[0];
  auto tensors = tensors_of(rank);
  const std::vector<TensorDestination> good = host_destinations(tensors);
  const std::string last = good.back().name;
  std::string tensor;

  std::vector<TensorDestination> unknown = good;
  unknown.back().name = "model.layers.0.no_such.weight";
  EXPECT_EQ(refused(ckpt, plan, 0, unknown, &tensor), ErrorKind::kInvalidArgument);
  EXPECT_EQ(tensor, "model.layers.0.no_such.weight");

  std::vector<TensorDestination> short_one = good;
  short_one.back().bytes -= 1;
  EXPECT_EQ(refused(ckpt, plan, 0, short_one, &tensor), ErrorKind::kInvalidArgument);
  EXPECT_EQ(tensor, last);

  std::vector<TensorDestination> twice = good;
  twice.push_back(good.back());
  EXPECT_EQ(refused(ckpt, plan, 0, twice, &tensor), ErrorKind::kInvalidArgument);
  EXPECT_EQ(tensor, last);

  std::vector<TensorDestination> mixed = good;
  mixed.back().device = 0;
  EXPECT_EQ(refused(ckpt, plan, 0, mixed, &tensor), ErrorKind::kInvalidArgument);
  EXPECT_EQ(tensor, last);

  EXPECT_EQ(refused(ckpt, plan, 2, good, &tensor), ErrorKind::kInvalidArgument);  // no rank 2

  for (const auto& [name, bytes] : tensors) {
    EXPECT_EQ(std::count(bytes.begin(), bytes.end(), kUnwritten), static_cast<long>(bytes.size()))
        << name << " was written by a refused load";
  }
}

// GPU destinations (one device allocation per parameter, as an engine's CUDA tensors): the same
// bytes as the host load, through the CUDA uploader. Needs a GPU (bench/gpu/run_device_checks.sh
// runs it).
TEST(TensorDestinationsSome, GpuDestinationsHoldTheHostLoadsBytes) {
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "needs a GPU: " << why;
  TempDir dir;
  const Checkpoint ckpt =
      Checkpoint::open(make_tiny_case(dir, {"qwen3_moe", "fp8", "", 2, 2}, kSeed));
  const Plan plan = plan_of(ckpt, 2, 2);
  const std::vector<RankWeights> reference = load_ranks(ckpt, plan);
  const RankPlan& rank = plan.ranks[1];
  std::vector<DeviceBuffer> buffers;
  std::vector<TensorDestination> gpu;
  for (const PlanParam& p : rank.params) {
    buffers.emplace_back(0, p.nbytes);
    gpu.push_back({p.name, 0, buffers.back().address(), p.nbytes});
  }
  DeviceLoadOptions ring;
  ring.window_bytes = 4096;
  load_rank_into_tensors(ckpt, plan, rank.rank, gpu, {}, ring);
  for (size_t i = 0; i < rank.params.size(); ++i) {
    std::vector<std::byte> back(rank.params[i].nbytes);
    buffers[i].copy_to_host(0, back);
    EXPECT_TRUE(same_bytes(back, reference[1], rank.params[i])) << rank.params[i].name;
  }
}

// GPU destinations where CUDA cannot be used: Error(kDevice) saying why, nothing written.
TEST(TensorDestinationsSome, GpuDestinationsWithoutCudaAreADeviceError) {
  if (cuda_unavailable_reason().empty()) GTEST_SKIP() << "CUDA is usable here";
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_tiny_case(dir, {"llama", "none", "", 2, 1}, kSeed));
  const Plan plan = plan_of(ckpt, 2, 1);
  auto tensors = tensors_of(plan.ranks[0]);
  std::vector<TensorDestination> gpu = host_destinations(tensors);
  for (TensorDestination& d : gpu) d.device = 0;
  std::string tensor;
  EXPECT_EQ(refused(ckpt, plan, 0, gpu, &tensor), ErrorKind::kDevice);
}

}  // namespace
}  // namespace shardload
