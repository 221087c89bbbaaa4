// The hardware limits a load is measured against, in the same run: a multi-threaded memcpy of N
// bytes
//   --dest huge   into a freshly mapped destination advised for transparent huge pages, faults
//   included
//                 (the limit of a load into new memory);
//   --dest 4k     the same into 4 KiB pages (MADV_NOHUGEPAGE);
//   --dest warm   into a destination already faulted in (the limit of an in-place reload);
//   --prime       only touch and free 2 x N bytes, printing nothing. Run just before a measured
//   process so that
//                 it finds memory the hypervisor has backed: on a VM that returns freed guest pages
//                 to the host (virtio-balloon free page reporting), first touch after idle costs
//                 several times more, and which of two back-to-back processes pays it would
//                 otherwise decide the result.
// Prints one line: "<GB/s> <seconds> <thp_fault_alloc delta>". Timing covers mmap, madvise and the
// copy.
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

long thp_fault_alloc() {
  std::ifstream vmstat("/proc/vmstat");
  std::string key;
  long value = 0;
  while (vmstat >> key >> value) {
    if (key == "thp_fault_alloc") return value;
  }
  return -1;
}

std::byte* map_bytes(size_t bytes, int advice) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    std::exit(1);
  }
  madvise(p, bytes, advice);
  return static_cast<std::byte*>(p);
}

void parallel_copy(std::byte* dst, const std::byte* src, size_t bytes, int threads) {
  std::vector<std::thread> pool;
  const size_t per = (bytes / threads + 4095) / 4096 * 4096;
  for (int t = 0; t < threads; ++t) {
    const size_t begin = std::min(bytes, per * t);
    const size_t end = std::min(bytes, begin + per);
    pool.emplace_back([=] { std::memcpy(dst + begin, src + begin, end - begin); });
  }
  for (std::thread& t : pool) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t{1} << 30;
  int threads = 2;
  std::string dest = "huge";
  bool prime = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--prime") {
      prime = true;
      continue;
    }
    if (i + 1 == argc) break;
    ++i;
    if (flag == "--bytes") bytes = std::strtoull(argv[i], nullptr, 10);
    if (flag == "--threads") threads = std::atoi(argv[i]);
    if (flag == "--dest") dest = argv[i];
    if (flag != "--bytes" && flag != "--threads" && flag != "--dest")
      bytes = 0;  // unknown flag: usage
  }
  if (bytes == 0 || threads < 1 || (dest != "huge" && dest != "4k" && dest != "warm")) {
    std::fprintf(stderr,
                 "usage: memcpy_limit [--bytes N] [--threads T] [--dest huge|4k|warm] [--prime]\n");
    return 2;
  }
  if (prime) {
    std::byte* touched = map_bytes(2 * bytes, MADV_HUGEPAGE);
    std::memset(touched, 1, 2 * bytes);
    munmap(touched, 2 * bytes);
    return 0;
  }
  std::byte* src = map_bytes(bytes, MADV_HUGEPAGE);
  std::memset(src, 1, bytes);
  std::byte* warm = nullptr;
  if (dest == "warm") {
    warm = map_bytes(bytes, MADV_HUGEPAGE);
    std::memset(warm, 0, bytes);
  }
  const long faults_before = thp_fault_alloc();
  const auto start = std::chrono::steady_clock::now();
  std::byte* dst =
      warm != nullptr ? warm : map_bytes(bytes, dest == "huge" ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  parallel_copy(dst, src, bytes, threads);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const long faults = thp_fault_alloc() - faults_before;
  std::printf("%.3f %.4f %ld\n", static_cast<double>(bytes) / seconds / 1e9, seconds, faults);
  return 0;
}
