#include "device/cuda.h"

#include <fmt/format.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "shardload/error.h"

#ifdef SHARDLOAD_HAVE_CUDA
#include <cuda.h>
#include <dlfcn.h>
#endif

namespace shardload::device::cuda {

#ifndef SHARDLOAD_HAVE_CUDA

namespace {
[[noreturn]] void unavailable() {
  throw Error(ErrorKind::kDevice,
              "this shardload was built without CUDA support (SHARDLOAD_CUDA=OFF "
              "or no CUDA toolkit at build time): --device cuda is unavailable");
}
}  // namespace

std::string unavailable_reason() {
  return "this shardload was built without CUDA support (SHARDLOAD_CUDA=OFF or no CUDA toolkit at "
         "build time)";
}
int device_count() { unavailable(); }
std::string device_name(int) { unavailable(); }
DevicePtr alloc(int, size_t) { unavailable(); }
void free(int, DevicePtr) noexcept {}
void* host_alloc(size_t) { unavailable(); }
void host_free(void*) noexcept {}
Stream stream_create(int) { unavailable(); }
void stream_destroy(int, Stream) noexcept {}
void stream_sync(int, Stream) { unavailable(); }
void copy_h2d_async(int, DevicePtr, const void*, size_t, Stream) { unavailable(); }
void copy_h2d(int, DevicePtr, const void*, size_t) { unavailable(); }
void copy_d2h(int, void*, DevicePtr, size_t) { unavailable(); }
Event event_record(int, Stream) { unavailable(); }
void event_wait(int, Event) { unavailable(); }
IpcHandle ipc_handle(int, DevicePtr) { unavailable(); }
DevicePtr ipc_open(int, const IpcHandle&) { unavailable(); }
void ipc_close(int, DevicePtr) noexcept {}

#else

namespace {

#define SHARDLOAD_STR2(x) #x
#define SHARDLOAD_STR(x) SHARDLOAD_STR2(x)
// Each entry point with its type from cuda.h and its versioned symbol (cuMemAlloc is cuMemAlloc_v2:
// the macro expands before the name is made a string).
// clang-format off
#define SHARDLOAD_CUDA_CALLS(X)                                                                \
  X(cuInit) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount) X(cuDeviceGet)         \
  X(cuDeviceGetName) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuMemAlloc) X(cuMemFree) \
  X(cuMemHostAlloc) X(cuMemFreeHost) X(cuStreamCreate) X(cuStreamDestroy)                      \
  X(cuStreamSynchronize) X(cuMemcpyHtoDAsync) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuEventCreate) \
  X(cuEventRecord) X(cuEventSynchronize) X(cuEventDestroy) X(cuIpcGetMemHandle)                \
  X(cuIpcOpenMemHandle) X(cuIpcCloseMemHandle)
// clang-format on

struct Driver {
#define SHARDLOAD_MEMBER(name) decltype(&name) p_##name = nullptr;
  SHARDLOAD_CUDA_CALLS(SHARDLOAD_MEMBER)
#undef SHARDLOAD_MEMBER
  std::string reason;  // why unusable; "" when usable
  int devices = 0;
  std::vector<CUcontext> contexts;
};

std::string result_text(const Driver& d, CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.p_cuGetErrorName == nullptr || d.p_cuGetErrorName(result, &name) != CUDA_SUCCESS)
    name = nullptr;
  if (d.p_cuGetErrorString == nullptr || d.p_cuGetErrorString(result, &text) != CUDA_SUCCESS)
    text = nullptr;
  return fmt::format("{} ({})",
                     name != nullptr ? name : fmt::format("CUresult {}", static_cast<int>(result)),
                     text != nullptr ? text : "no description");
}

Driver open_driver() {
  Driver d;
  // Never unloaded: contexts and allocations live until the process ends.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    d.reason = fmt::format("no CUDA driver on this machine (dlopen libcuda.so.1: {})",
                           why != nullptr ? why : "not found");
    return d;
  }
#define SHARDLOAD_RESOLVE(name)                                                         \
  d.p_##name = reinterpret_cast<decltype(&name)>(dlsym(lib, SHARDLOAD_STR(name)));      \
  if (d.p_##name == nullptr) {                                                          \
    d.reason = fmt::format("the CUDA driver lacks {} (too old?)", SHARDLOAD_STR(name)); \
    return d;                                                                           \
  }
  SHARDLOAD_CUDA_CALLS(SHARDLOAD_RESOLVE)
#undef SHARDLOAD_RESOLVE
  if (const CUresult r = d.p_cuInit(0); r != CUDA_SUCCESS) {
    d.reason = fmt::format("cuInit failed: {}", result_text(d, r));
    return d;
  }
  if (const CUresult r = d.p_cuDeviceGetCount(&d.devices); r != CUDA_SUCCESS) {
    d.reason = fmt::format("cuDeviceGetCount failed: {}", result_text(d, r));
    return d;
  }
  if (d.devices == 0) d.reason = "the CUDA driver sees no GPU";
  d.contexts.assign(static_cast<size_t>(d.devices), nullptr);
  return d;
}

std::mutex g_mutex;

Driver& driver() {
  static Driver d = open_driver();
  return d;
}

const Driver& usable() {
  const Driver& d = driver();
  if (!d.reason.empty())
    throw Error(ErrorKind::kDevice, fmt::format("--device cuda: {}", d.reason));
  return d;
}

void check(const Driver& d, CUresult result, const char* call) {
  if (result != CUDA_SUCCESS) {
    throw Error(ErrorKind::kDevice, fmt::format("{} failed: {}", call, result_text(d, result)));
  }
}

// The device's primary context, retained once, made current on this thread.
const Driver& enter(int device) {
  Driver& d = const_cast<Driver&>(usable());
  if (device < 0 || device >= d.devices) {
    throw Error(ErrorKind::kDevice, "no such GPU",
                {.field = "device",
                 .expected = fmt::format("0 to {}", d.devices - 1),
                 .found = fmt::format("{}", device)});
  }
  CUcontext ctx = nullptr;
  {
    std::lock_guard lock(g_mutex);
    CUcontext& slot = d.contexts[static_cast<size_t>(device)];
    if (slot == nullptr) {
      CUdevice dev = 0;
      check(d, d.p_cuDeviceGet(&dev, device), "cuDeviceGet");
      check(d, d.p_cuDevicePrimaryCtxRetain(&slot, dev), "cuDevicePrimaryCtxRetain");
    }
    ctx = slot;
  }
  check(d, d.p_cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return d;
}

}  // namespace

std::string unavailable_reason() { return driver().reason; }

int device_count() { return usable().devices; }

std::string device_name(int device) {
  const Driver& d = enter(device);
  CUdevice dev = 0;
  check(d, d.p_cuDeviceGet(&dev, device), "cuDeviceGet");
  char name[256] = {};
  check(d, d.p_cuDeviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName");
  return name;
}

DevicePtr alloc(int device, size_t bytes) {
  const Driver& d = enter(device);
  CUdeviceptr ptr = 0;
  const CUresult r = d.p_cuMemAlloc(&ptr, bytes == 0 ? 1 : bytes);
  if (r != CUDA_SUCCESS) {
    throw Error(
        ErrorKind::kDevice, fmt::format("cuMemAlloc failed: {}", result_text(d, r)),
        {.field = fmt::format("GPU {}", device), .expected = fmt::format("{} bytes free", bytes)});
  }
  return ptr;
}

void free(int device, DevicePtr ptr) noexcept {
  try {
    const Driver& d = enter(device);
    d.p_cuMemFree(ptr);
  } catch (const Error&) {  // freeing at exit: nothing to report to
  }
}

void* host_alloc(size_t bytes) {
  const Driver& d = enter(0);
  void* ptr = nullptr;
  check(d, d.p_cuMemHostAlloc(&ptr, bytes == 0 ? 1 : bytes, CU_MEMHOSTALLOC_PORTABLE),
        "cuMemHostAlloc");
  return ptr;
}

void host_free(void* ptr) noexcept {
  if (ptr == nullptr) return;
  try {
    const Driver& d = enter(0);
    d.p_cuMemFreeHost(ptr);
  } catch (const Error&) {
  }
}

Stream stream_create(int device) {
  const Driver& d = enter(device);
  CUstream stream = nullptr;
  check(d, d.p_cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return stream;
}

void stream_destroy(int device, Stream stream) noexcept {
  try {
    const Driver& d = enter(device);
    d.p_cuStreamDestroy(static_cast<CUstream>(stream));
  } catch (const Error&) {
  }
}

void stream_sync(int device, Stream stream) {
  const Driver& d = enter(device);
  check(d, d.p_cuStreamSynchronize(static_cast<CUstream>(stream)), "cuStreamSynchronize");
}

void copy_h2d_async(int device, DevicePtr dst, const void* src, size_t bytes, Stream stream) {
  const Driver& d = enter(device);
  check(d, d.p_cuMemcpyHtoDAsync(dst, src, bytes, static_cast<CUstream>(stream)),
        "cuMemcpyHtoDAsync");
}

void copy_h2d(int device, DevicePtr dst, const void* src, size_t bytes) {
  const Driver& d = enter(device);
  check(d, d.p_cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
}

void copy_d2h(int device, void* dst, DevicePtr src, size_t bytes) {
  const Driver& d = enter(device);
  check(d, d.p_cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
}

Event event_record(int device, Stream stream) {
  const Driver& d = enter(device);
  CUevent event = nullptr;
  check(d, d.p_cuEventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  check(d, d.p_cuEventRecord(event, static_cast<CUstream>(stream)), "cuEventRecord");
  return event;
}

void event_wait(int device, Event event) {
  const Driver& d = enter(device);
  const CUresult r = d.p_cuEventSynchronize(static_cast<CUevent>(event));
  d.p_cuEventDestroy(static_cast<CUevent>(event));
  check(d, r, "cuEventSynchronize");
}

IpcHandle ipc_handle(int device, DevicePtr ptr) {
  const Driver& d = enter(device);
  CUipcMemHandle handle;
  check(d, d.p_cuIpcGetMemHandle(&handle, ptr), "cuIpcGetMemHandle");
  static_assert(sizeof handle == sizeof(IpcHandle));
  IpcHandle out;
  std::memcpy(out.data(), &handle, sizeof handle);
  return out;
}

DevicePtr ipc_open(int device, const IpcHandle& bytes) {
  const Driver& d = enter(device);
  CUipcMemHandle handle;
  std::memcpy(&handle, bytes.data(), sizeof handle);
  CUdeviceptr ptr = 0;
  check(d, d.p_cuIpcOpenMemHandle(&ptr, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
        "cuIpcOpenMemHandle");
  return ptr;
}

void ipc_close(int device, DevicePtr ptr) noexcept {
  try {
    const Driver& d = enter(device);
    d.p_cuIpcCloseMemHandle(ptr);
  } catch (const Error&) {
  }
}

#endif

}  // namespace shardload::device::cuda
