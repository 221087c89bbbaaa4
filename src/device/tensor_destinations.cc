// A rank straight into an engine's tensors (load_rank_into_tensors): the staging ring, as for a
// GPU rank, with each window cut at the parameters' bounds (ScatterUploader) into one target per
// destination tensor, host memory or a GPU's.
#include <fmt/format.h>

#include <chrono>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/seconds_since.h"
#include "device/cuda_uploader.h"
#include "device/scatter_uploader.h"
#include "device/staging_ring.h"
#include "shardload/device.h"
#include "shardload/error.h"

namespace shardload {
namespace {

// The destination of each of the rank's parameters (-1: none), every destination checked first.
std::vector<long> match_destinations(const RankPlan& rank,
                                     const std::vector<TensorDestination>& destinations) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < rank.params.size(); ++i) index.emplace(rank.params[i].name, i);
  std::vector<long> target(rank.params.size(), -1);
  for (size_t d = 0; d < destinations.size(); ++d) {
    const TensorDestination& dest = destinations[d];
    const auto found = index.find(dest.name);
    if (found == index.end()) {
      throw Error(ErrorKind::kInvalidArgument, "a destination is not a parameter of the rank",
                  {.tensor = dest.name,
                   .field = "destinations",
                   .expected = fmt::format("a parameter of rank {}", rank.rank),
                   .found = "no such parameter"});
    }
    const PlanParam& param = rank.params[found->second];
    if (target[found->second] >= 0) {
      throw Error(ErrorKind::kInvalidArgument, "a parameter has two destinations",
                  {.tensor = dest.name,
                   .field = "destinations",
                   .expected = "one destination",
                   .found = "two"});
    }
    if (dest.bytes != param.nbytes) {
      throw Error(ErrorKind::kInvalidArgument, "a destination is not the parameter's size",
                  {.tensor = dest.name,
                   .field = "destinations",
                   .expected = fmt::format("{} bytes", param.nbytes),
                   .found = fmt::format("{} bytes", dest.bytes)});
    }
    if (dest.address == 0 && dest.bytes != 0) {
      throw Error(ErrorKind::kInvalidArgument, "a destination has no address",
                  {.tensor = dest.name, .field = "destinations"});
    }
    if ((dest.device < 0) != (destinations.front().device < 0)) {
      throw Error(ErrorKind::kInvalidArgument,
                  "some destinations are in host memory and others on a GPU",
                  {.tensor = dest.name,
                   .field = "destinations",
                   .expected = destinations.front().device < 0 ? "host memory" : "a GPU",
                   .found = dest.device < 0 ? "host memory" : fmt::format("GPU {}", dest.device)});
    }
    target[found->second] = static_cast<long>(d);
  }
  return target;
}

}  // namespace

void load_rank_into_tensors(const Checkpoint& ckpt, const Plan& plan, int rank,
                            const std::vector<TensorDestination>& destinations,
                            const LoadOptions& options, const DeviceLoadOptions& device,
                            TensorLoadStats* stats) {
  if (rank < 0 || rank >= static_cast<int>(plan.ranks.size())) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("rank {} is outside the layout", rank));
  }
  const RankPlan& rank_plan = plan.ranks[static_cast<size_t>(rank)];
  const std::vector<long> target = match_destinations(rank_plan, destinations);
  const bool on_gpu = !destinations.empty() && destinations.front().device >= 0;
  if (on_gpu) {
    const std::string why = cuda_unavailable_reason();
    if (!why.empty()) throw Error(ErrorKind::kDevice, "destinations on a GPU: " + why);
  }
  std::vector<device::ScatteredParam> params;
  params.reserve(rank_plan.params.size());
  for (size_t i = 0; i < rank_plan.params.size(); ++i) {
    params.push_back({rank_plan.params[i].offset, rank_plan.params[i].nbytes, target[i]});
  }
  std::unique_ptr<device::Uploader> inner;
  if (on_gpu) {
    std::vector<device::CudaUploader::Target> targets;
    for (const TensorDestination& d : destinations)
      targets.push_back({d.device, d.address, d.bytes});
    inner = std::make_unique<device::CudaUploader>(std::move(targets));
  } else {
    std::vector<std::span<std::byte>> targets;
    for (const TensorDestination& d : destinations) {
      targets.emplace_back(reinterpret_cast<std::byte*>(d.address), d.bytes);
    }
    inner = std::make_unique<device::HostUploader>(std::move(targets));
  }
  const auto start = std::chrono::steady_clock::now();
  const device::RingOptions ring = device::ring_options(options, device.window_bytes, device.depth);
  device::RingStats ring_stats;
  std::vector<std::vector<uint8_t>> processed;
  device::ScatterUploader scatter(*inner, std::move(params));
  device::load_through_ring(ckpt, plan, {rank}, scatter, ring, processed, &ring_stats);
  if (stats != nullptr) {
    stats->bytes_read = ring_stats.bytes_read;
    stats->bytes_copied = scatter.bytes_scattered();
    stats->staging_bytes = ring_stats.staging_bytes;
    stats->windows = ring_stats.windows;
    stats->seconds = seconds_since(start);
    stats->io = ring_stats.io;
  }
}

}  // namespace shardload
