// The limit a load to a GPU is measured against: host-to-device copy bandwidth from page-locked
// memory (cuMemcpyHtoDAsync on one stream, the loader's path), best of several repeats.
//   gpu_h2d_limit [--bytes N] [--repeats R] [--device D]
// Prints one line: "<GB/s> <bytes>". Exit 1 with the reason when no GPU can be used.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "device/cuda.h"
#include "shardload/error.h"

int main(int argc, char** argv) {
  namespace cuda = shardload::device::cuda;
  size_t bytes = size_t{2} << 30;
  int repeats = 5;
  int device = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--bytes") bytes = std::stoull(argv[i + 1]);
    if (arg == "--repeats") repeats = std::stoi(argv[i + 1]);
    if (arg == "--device") device = std::stoi(argv[i + 1]);
  }
  try {
    void* host = cuda::host_alloc(bytes);
    std::memset(host, 1, bytes);
    const cuda::DevicePtr dst = cuda::alloc(device, bytes);
    const cuda::Stream stream = cuda::stream_create(device);
    double best = 0;
    for (int r = 0; r <= repeats; ++r) {  // the first is a warm-up
      const auto start = std::chrono::steady_clock::now();
      cuda::copy_h2d_async(device, dst, host, bytes, stream);
      cuda::stream_sync(device, stream);
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (r > 0 && bytes / s / 1e9 > best) best = bytes / s / 1e9;
    }
    std::printf("%.2f %zu\n", best, bytes);
    cuda::stream_destroy(device, stream);
    cuda::free(device, dst);
    cuda::host_free(host);
    return 0;
  } catch (const shardload::Error& e) {
    std::fprintf(stderr, "gpu_h2d_limit: %s\n", e.what());
    return 1;
  }
}
