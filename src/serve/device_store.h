// `serve --device cuda`: the served ranks also in GPU memory, one allocation per rank, each
// exported as a CUDA IPC handle in manifest.json ("cuda"), so that an engine process maps them with
// no copy (cuIpcOpenMemHandle). The host shared memory stays the source of truth and keeps the
// sequence words: every commit group of an update or rebalance copies the ranks to their GPUs
// before it ends (sequence word even again), so a reader that checks the word around its read of
// device memory sees a whole commit, and the allocations, and the handles, never change.
// docs/gpu.md.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "serve/shm_store.h"
#include "shardload/device.h"

namespace shardload::serve {

inline constexpr const char* kCudaIpcFormat = "shardload-cuda-ipc/1";

class DeviceStore {
 public:
  // Allocates every rank of the store's live model on its GPU (rank % GPUs, or device_map), copies
  // the bytes there, and publishes the handles in the manifest. Throws Error(kDevice) without a
  // usable GPU.
  DeviceStore(ShmStore& store, const std::vector<int>& device_map);
  ~DeviceStore();
  DeviceStore(const DeviceStore&) = delete;
  DeviceStore& operator=(const DeviceStore&) = delete;

  // Copies every live rank to its device allocation (in place).
  void sync();
  // manifest.json's "cuda" member.
  nlohmann::json manifest() const;

 private:
  ShmStore& store_;
  std::vector<DeviceBuffer> ranks_;
};

}  // namespace shardload::serve
