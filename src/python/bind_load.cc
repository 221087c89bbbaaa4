// shardload.load: every rank (or some) of a layout in shardload's buffers, seen as zero-copy tensors.
#include <pybind11/stl.h>

#include <memory>
#include <tuple>
#include <vector>

#include "python/bindings.h"
#include "python/path_arg.h"
#include "python/json_value.h"
#include "python/layout_kwargs.h"
#include "python/rank_tensors.h"
#include "shardload/checkpoint.h"
#include "shardload/device.h"
#include "shardload/error.h"

namespace py = pybind11;

namespace shardload::python {
namespace {

// What a load owns; every tensor taken from it keeps it alive.
struct LoadedRanks {
  Plan plan;
  std::vector<RankWeights> ranks;
  std::vector<DeviceRankWeights> device_ranks;  // device="cuda": the ranks, on GPUs
  LoadStats stats;
};

class LoadedModel {
 public:
  explicit LoadedModel(std::shared_ptr<LoadedRanks> loaded) : loaded_(std::move(loaded)) {}

  std::vector<int> ranks() const {
    std::vector<int> out;
    for (const RankWeights& w : loaded_->ranks) out.push_back(w.rank);
    for (const DeviceRankWeights& w : loaded_->device_ranks) out.push_back(w.rank);
    return out;
  }
  py::dict tensors(int rank, bool internal) const {
    for (const RankWeights& w : loaded_->ranks) {
      if (w.rank == rank) return rank_tensors(loaded_, loaded_->plan, w, internal);
    }
    for (const DeviceRankWeights& w : loaded_->device_ranks) {
      if (w.rank == rank) return device_rank_tensors(loaded_, loaded_->plan, w, internal);
    }
    throw py::index_error("rank " + std::to_string(rank) + " was not loaded");
  }
  std::string device() const { return loaded_->device_ranks.empty() ? "cpu" : "cuda"; }
  // The GPU of each rank (device="cuda"), {rank: index}; empty on the host.
  py::dict devices() const {
    py::dict out;
    for (const DeviceRankWeights& w : loaded_->device_ranks) out[py::int_(w.rank)] = w.buffer.device();
    return out;
  }
  py::object plan(bool pieces) const { return to_python(loaded_->plan.to_json(pieces)); }
  py::dict stats() const {
    const LoadStats& s = loaded_->stats;
    py::dict out;
    out["bytes_read"] = s.bytes_read;
    out["bytes_written"] = s.bytes_written;
    out["seconds_allocate"] = s.seconds_allocate;
    out["seconds_copy"] = s.seconds_copy;
    out["seconds_postprocess"] = s.seconds_postprocess;
    out["io"] = io_mode_name(s.io);
    out["read_requests"] = s.read_requests;
    return out;
  }

 private:
  std::shared_ptr<LoadedRanks> loaded_;
};

LoadedModel load(const py::object& model_path, const std::optional<std::vector<int>>& ranks, int threads,
                 const std::string& io, py::object progress, const std::string& device,
                 const std::optional<std::vector<int>>& device_map, const py::kwargs& layout) {
  const DeviceKind kind = parse_device_kind(device);
  if (kind == DeviceKind::kCpu && device_map) {
    throw Error(ErrorKind::kInvalidArgument, "device_map needs device=\"cuda\"");
  }
  if (kind == DeviceKind::kCuda) {
    const std::string why = cuda_unavailable_reason();
    if (!why.empty()) throw Error(ErrorKind::kDevice, "device=\"cuda\": " + why);
  }
  const std::string model = path_arg(model_path);
  const ParallelConfig parallel = layout_from_kwargs(layout);
  auto loaded = std::make_shared<LoadedRanks>();
  ProgressRelay relay(std::move(progress));
  LoadOptions options;
  options.threads = threads;
  options.io = io_mode_from_name(io);
  if (ranks) options.ranks = *ranks;
  options.progress = relay.function();
  {
    py::gil_scoped_release release;
    const Checkpoint ckpt = Checkpoint::open(model);
    loaded->plan = make_plan(ckpt, parallel);
    if (kind == DeviceKind::kCuda) {
      DeviceLoadOptions device_options;
      if (device_map) device_options.device_map = *device_map;
      loaded->device_ranks =
          load_ranks_to_device(ckpt, loaded->plan, options, device_options, &loaded->stats);
    } else {
      loaded->ranks = load_ranks(ckpt, loaded->plan, options, &loaded->stats);
    }
  }
  relay.rethrow();
  return LoadedModel(std::move(loaded));
}

// {name: (address, bytes, device)}: device -1 for host memory, else the GPU's ordinal.
std::vector<TensorDestination> destinations_from(const py::dict& destinations) {
  std::vector<TensorDestination> out;
  out.reserve(destinations.size());
  for (const auto& [name, where] : destinations) {
    const auto [address, bytes, device] = where.cast<std::tuple<uint64_t, uint64_t, int>>();
    out.push_back({name.cast<std::string>(), device, address, bytes});
  }
  return out;
}

py::dict load_into_tensors(const py::object& model_path, int rank, const py::dict& destinations, int threads,
                           const std::string& io, uint64_t window_bytes, const py::kwargs& layout) {
  const std::string model = path_arg(model_path);
  const ParallelConfig parallel = layout_from_kwargs(layout);
  const std::vector<TensorDestination> dests = destinations_from(destinations);
  LoadOptions options;
  options.threads = threads;
  options.io = io_mode_from_name(io);
  DeviceLoadOptions ring;
  if (window_bytes != 0) ring.window_bytes = window_bytes;
  TensorLoadStats stats;
  {
    py::gil_scoped_release release;
    const Checkpoint ckpt = Checkpoint::open(model);
    const Plan plan = make_plan(ckpt, parallel);
    load_rank_into_tensors(ckpt, plan, rank, dests, options, ring, &stats);
  }
  py::dict out;
  out["bytes_read"] = stats.bytes_read;
  out["bytes_copied"] = stats.bytes_copied;
  out["staging_bytes"] = stats.staging_bytes;
  out["windows"] = stats.windows;
  out["seconds"] = stats.seconds;
  out["io"] = io_mode_name(stats.io);
  return out;
}

}  // namespace

void bind_load(py::module_& m) {
  py::class_<LoadedModel>(m, "LoadedModel", "Rank buffers of one load; tensors share them")
      .def_property_readonly("ranks", &LoadedModel::ranks)
      .def("tensors", &LoadedModel::tensors, py::arg("rank"), py::kw_only(), py::arg("internal") = false,
           "{name: Tensor} of one rank (internal: also FP8 scale parts and float32 sources)")
      .def_property_readonly("device", &LoadedModel::device, "\"cpu\" or \"cuda\"")
      .def_property_readonly("devices", &LoadedModel::devices, "{rank: GPU index} of a device load")
      .def("plan", &LoadedModel::plan, py::kw_only(), py::arg("pieces") = false)
      .def_property_readonly("stats", &LoadedModel::stats);
  m.def("load_into_tensors", &load_into_tensors, py::arg("model"), py::kw_only(), py::arg("rank"),
        py::arg("destinations"), py::arg("threads") = 0, py::arg("io") = "auto", py::arg("window_bytes") = 0,
        "Loads one rank of a layout straight into tensors the caller holds (an engine's parameters), "
        "{layout name: (address, bytes, device)} (device -1: host memory), through a ring of staging "
        "windows: the rank is never whole in host memory. Returns the load's figures.");
  m.def("cuda_unavailable_reason", &cuda_unavailable_reason,
        "\"\" when device=\"cuda\" can be used here, else why not (no driver, no GPU, a build "
        "without CUDA)");
  m.def("load", &load, py::arg("model"), py::kw_only(), py::arg("ranks") = py::none(), py::arg("threads") = 0,
        py::arg("io") = "auto", py::arg("progress") = py::none(), py::arg("device") = "cpu",
        py::arg("device_map") = py::none(),
        "Loads a layout (keywords as the command line's layout options) into one buffer per rank; "
        "device=\"cuda\": one GPU allocation per rank (rank % GPUs, or device_map[i] for the i-th "
        "rank loaded), its tensors CUDA DLPack tensors");
}

}  // namespace shardload::python
