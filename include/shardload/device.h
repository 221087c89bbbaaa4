// Ranks loaded into GPU memory (`load --device cuda`, Python `device="cuda"`): one device
// allocation per rank, filled through a ring of page-locked host buffers (docs/gpu.md). CUDA is
// opened at run time: on a machine without a driver or GPU every call here throws Error(kDevice)
// saying why.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/checkpoint.h"
#include "shardload/loader.h"
#include "shardload/plan.h"

namespace shardload {

enum class DeviceKind { kCpu, kCuda };

// "cpu" or "cuda"; Error(kInvalidArgument) otherwise.
DeviceKind parse_device_kind(std::string_view text);

// "" when CUDA can be used here (driver loaded, at least one GPU), else why not.
std::string cuda_unavailable_reason();
// GPUs visible; Error(kDevice) when none can be used.
int cuda_device_count();

// A `--device-map`: the GPU of each rank loaded, in the order of the ranks ("0,0,1,1"); an empty
// text is the default (the i-th rank loaded on GPU rank % gpus). Error(kInvalidArgument) on a
// malformed list.
std::vector<int> parse_device_map(std::string_view text);
// The GPU of each rank of `ranks`: `device_map` when given (one entry per rank loaded, each below
// `gpus`), else rank % gpus. Error(kInvalidArgument) when the map does not fit.
std::vector<int> assign_devices(const std::vector<int>& ranks, int gpus,
                                const std::vector<int>& device_map);

// One allocation on a GPU, freed with its owner (move-only).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int device, size_t size);  // uninitialised device memory
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  int device() const { return device_; }
  uint64_t address() const { return address_; }  // a CUdeviceptr
  size_t size() const { return size_; }
  // Synchronous copies between this buffer (from byte `offset`) and host memory.
  void copy_to_host(uint64_t offset, std::span<std::byte> out) const;
  void copy_from_host(uint64_t offset, std::span<const std::byte> in);
  // The CUDA IPC handle of the allocation (cuIpcGetMemHandle): 64 bytes another process opens.
  std::array<char, 64> ipc_handle() const;

 private:
  int device_ = -1;
  uint64_t address_ = 0;
  size_t size_ = 0;
};

// Another process's device allocation, opened from its CUDA IPC handle (cuIpcOpenMemHandle: no
// copy) and closed with this object (move-only). `bytes` is what the exporter says it holds.
class IpcMapping {
 public:
  IpcMapping(int device, const std::array<char, 64>& handle, size_t bytes);
  ~IpcMapping();
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;
  int device() const { return device_; }
  uint64_t address() const { return address_; }
  size_t size() const { return size_; }

 private:
  int device_;
  uint64_t address_;
  size_t size_;
};

// The 64 bytes of a handle from its 128 hex digits (manifest.json's "ipc_handle");
// Error(kInvalidArgument) otherwise.
std::array<char, 64> ipc_handle_from_hex(std::string_view hex);
std::string ipc_handle_hex(const std::array<char, 64>& handle);

// One rank in GPU memory: every parameter at its plan offset, as RankWeights has it on the host.
struct DeviceRankWeights {
  int rank = 0;
  DeviceBuffer buffer;
  std::vector<uint8_t> processed;  // as RankWeights::processed
};

struct DeviceLoadOptions {
  std::vector<int> device_map;                  // empty: rank i loaded goes to GPU rank % gpus
  uint64_t window_bytes = uint64_t{128} << 20;  // staging window, over all ranks
  int depth = 3;                                // staging buffers in the ring
};

struct DeviceLoadStats {
  uint64_t windows = 0;
  uint64_t staging_bytes = 0;
  double seconds_fill = 0;
  double seconds_postprocess = 0;
  double seconds_wait = 0;
};

// load_ranks into GPU memory: allocates each rank on its GPU and fills it through the staging ring
// (reads, dtype casts and FP8 post-processing on the host, asynchronous uploads on one stream per
// GPU). The bytes are those load_ranks gives, byte for byte.
std::vector<DeviceRankWeights> load_ranks_to_device(const Checkpoint& checkpoint, const Plan& plan,
                                                    const LoadOptions& options = {},
                                                    const DeviceLoadOptions& device = {},
                                                    LoadStats* stats = nullptr,
                                                    DeviceLoadStats* device_stats = nullptr);

// load_into on GPU ranks: loads the modules for which `modules[m]` is true (all when empty) into
// ranks already on their GPUs, in place (no allocation moves: IPC handles and tensors taken before
// stay valid); every other module keeps its bytes. Throws Error(kInvalidArgument) when a buffer
// does not fit the plan.
void load_into_device(const Checkpoint& checkpoint, const Plan& plan,
                      std::vector<DeviceRankWeights>& ranks, const std::vector<bool>& modules,
                      const LoadOptions& options = {}, const DeviceLoadOptions& device = {},
                      LoadStats* stats = nullptr);

// Where one parameter of a rank goes: an engine's own tensor, filled in place.
struct TensorDestination {
  std::string name;      // the parameter's name in the plan (layout.md's)
  int device = -1;       // -1: host memory; else the GPU's ordinal (`address` is a CUdeviceptr)
  uint64_t address = 0;  // the tensor's first byte; its bytes are contiguous
  uint64_t bytes = 0;    // must be the parameter's
};

struct TensorLoadStats {
  uint64_t bytes_read = 0;     // checkpoint bytes read
  uint64_t bytes_copied = 0;   // bytes written to the destinations
  uint64_t staging_bytes = 0;  // the host memory the load held: the ring's buffers
  uint64_t windows = 0;
  double seconds = 0;
  IoMode io = IoMode::kAuto;
};

// Loads rank `rank` of `plan` straight into the tensors that will hold it (an engine's parameters):
// windows of whole modules are read, converted and post-processed in a ring of staging buffers
// (DeviceLoadOptions: window_bytes, depth) and each parameter's bytes copied to its destination,
// so host memory holds the ring, never the whole rank. The bytes are load_ranks' byte for byte. A
// parameter without a destination is read and post-processed with its module (FP8 needs it), not
// copied. Only this rank's bytes are read. Error(kInvalidArgument) naming the tensor when a
// destination is not a parameter of the rank, is named twice, or is not the parameter's size, and
// when some destinations are on the host and others on GPUs; Error(kDevice) for GPU destinations
// where CUDA cannot be used. Nothing is written before every destination is checked.
void load_rank_into_tensors(const Checkpoint& checkpoint, const Plan& plan, int rank,
                            const std::vector<TensorDestination>& destinations,
                            const LoadOptions& options = {}, const DeviceLoadOptions& device = {},
                            TensorLoadStats* stats = nullptr);

// Copies host buffers to GPUs (one DeviceBuffer per buffer, on devices[i]), through the same ring
// of staging buffers: an export's ranks, or a test's reference.
std::vector<DeviceBuffer> upload_buffers(const std::vector<std::span<const std::byte>>& buffers,
                                         const std::vector<int>& devices);
// Copies from[i] to the start of to[i], in place (the allocations, and IPC handles to them, stay),
// through pinned staging; returns when every copy is done. Error(kInvalidArgument) when one does
// not fit.
void copy_to_devices(const std::vector<std::span<const std::byte>>& from,
                     std::vector<DeviceBuffer>& to);

}  // namespace shardload
