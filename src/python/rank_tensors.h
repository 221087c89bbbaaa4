#pragma once

#include <memory>

#include <pybind11/pybind11.h>

#include "python/tensor.h"
#include "shardload/device.h"
#include "shardload/loader.h"
#include "shardload/plan.h"

namespace shardload::python {

// {name: Tensor} of one rank's exported tensors (with `internal`, also the FP8 scale parts and float32
// sources post-processing reads), each sharing `weights`' buffer and keeping `owner` alive.
pybind11::dict rank_tensors(const std::shared_ptr<const void>& owner, const Plan& plan,
                            const RankWeights& weights, bool internal);

// The same for a rank in GPU memory: kDLCUDA tensors at the device allocation's offsets.
pybind11::dict device_rank_tensors(const std::shared_ptr<const void>& owner, const Plan& plan,
                                   const DeviceRankWeights& weights, bool internal);

// LoadOptions::progress calling a Python callable(done, total) from the loading threads, under the
// GIL, with `done` never going back (the threads finish jobs, and reach the GIL, in any order: a call
// carrying less than one already made is dropped, so the last call is (total, total)); the first
// exception it raises is kept and raised again by rethrow() once the load returned.
class ProgressRelay {
 public:
  explicit ProgressRelay(pybind11::object callback) : callback_(std::move(callback)) {}
  ~ProgressRelay();
  std::function<void(uint64_t, uint64_t)> function();
  void rethrow();

 private:
  pybind11::object callback_;
  std::exception_ptr error_;  // under the GIL
  uint64_t reported_ = 0;     // under the GIL
};

// An --io name ("auto", "pread", "mmap", "direct"); InvalidArgumentError otherwise.
IoMode io_mode_from_name(const std::string& name);

}  // namespace shardload::python
