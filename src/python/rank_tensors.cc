#include "python/rank_tensors.h"

#include "shardload/error.h"

namespace py = pybind11;

namespace shardload::python {

py::dict rank_tensors(const std::shared_ptr<const void>& owner, const Plan& plan, const RankWeights& weights,
                      bool internal) {
  py::dict out;
  for (const PlanParam& param : plan.ranks.at(static_cast<size_t>(weights.rank)).params) {
    if (!internal && !param.exported()) continue;
    // The buffer is shardload's and stays put (reloads are in place): consumers may write through it,
    // as an engine writes through its parameters.
    std::byte* data = const_cast<std::byte*>(weights.buffer.data()) + param.offset;
    out[py::str(param.name)] = Tensor{owner, data, param.dtype, param.shape, param.name};
  }
  return out;
}

py::dict device_rank_tensors(const std::shared_ptr<const void>& owner, const Plan& plan,
                             const DeviceRankWeights& weights, bool internal) {
  py::dict out;
  for (const PlanParam& param : plan.ranks.at(static_cast<size_t>(weights.rank)).params) {
    if (!internal && !param.exported()) continue;
    Tensor t{owner, reinterpret_cast<std::byte*>(weights.buffer.address() + param.offset), param.dtype,
             param.shape, param.name};
    t.device_type = 2;  // kDLCUDA
    t.device_id = weights.buffer.device();
    out[py::str(param.name)] = t;
  }
  return out;
}

ProgressRelay::~ProgressRelay() {
  py::gil_scoped_acquire gil;  // the callable is released under the GIL, wherever the relay ends
  callback_ = py::object();
}

std::function<void(uint64_t, uint64_t)> ProgressRelay::function() {
  if (callback_.is_none()) return {};
  return [this](uint64_t done, uint64_t total) {
    // The GIL serializes the calls (and guards error_): a callback that waits, releasing it, lets the
    // other loading threads call in meanwhile.
    py::gil_scoped_acquire gil;
    if (error_ || done < reported_) return;
    reported_ = done;
    try {
      callback_(done, total);
    } catch (py::error_already_set&) {
      error_ = std::current_exception();
    }
  };
}

void ProgressRelay::rethrow() {
  if (error_) std::rethrow_exception(error_);
}

IoMode io_mode_from_name(const std::string& name) {
  std::string names;
  for (const auto& [mode, text] : kIoModeNames) {
    if (name == text) return mode;
    names += (names.empty() ? "" : ", ") + std::string(text);
  }
  throw Error(ErrorKind::kInvalidArgument, "not a read path", {.field = "io", .expected = names, .found = name});
}

}  // namespace shardload::python
