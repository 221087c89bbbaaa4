// The few CUDA driver calls shardload makes, through libcuda.so.1 opened at run time (dlopen): the
// same binary runs on a machine without a GPU, where the first call throws Error(kDevice) saying
// why. The driver API, not the runtime: a GPU machine always has the driver, not always libcudart.
// Every call makes the device's primary context current on the calling thread first, so any thread
// may call any of these. Errors name the driver call and its error (Error(kDevice)).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace shardload::device::cuda {

using DevicePtr = uint64_t;
using Stream = void*;
using Event = void*;
using IpcHandle = std::array<char, 64>;  // CUipcMemHandle's bytes

// "" when the driver loaded and cuInit succeeded with at least one GPU, else why not (a build
// without CUDA, no libcuda.so.1, cuInit's error, no device).
std::string unavailable_reason();
// GPUs visible (CUDA_VISIBLE_DEVICES applies); Error(kDevice) when unavailable.
int device_count();
std::string device_name(int device);

DevicePtr alloc(int device, size_t bytes);
void free(int device, DevicePtr ptr) noexcept;
// Page-locked host memory, usable by every context (the uploads of every GPU read it).
void* host_alloc(size_t bytes);
void host_free(void* ptr) noexcept;

Stream stream_create(int device);
void stream_destroy(int device, Stream stream) noexcept;
void stream_sync(int device, Stream stream);
void copy_h2d_async(int device, DevicePtr dst, const void* src, size_t bytes, Stream stream);
void copy_h2d(int device, DevicePtr dst, const void* src, size_t bytes);
void copy_d2h(int device, void* dst, DevicePtr src, size_t bytes);
// An event recorded on `stream` now; event_wait waits for it and destroys it.
Event event_record(int device, Stream stream);
void event_wait(int device, Event event);

IpcHandle ipc_handle(int device, DevicePtr ptr);
// Maps another process's allocation into this one (no copy); close with ipc_close.
DevicePtr ipc_open(int device, const IpcHandle& handle);
void ipc_close(int device, DevicePtr ptr) noexcept;

}  // namespace shardload::device::cuda
