// The page-cache read limit a warm load is measured against: T threads pread() the given files
// (expected to be in the page cache) into one destination buffer that is already faulted in, in
// large requests handed out from a shared counter, so the number is the kernel's copy out of the
// page cache and nothing else (no page faults on the destination, no parsing, no planning).
//   pread_limit [--threads T] [--request BYTES] FILE...
// Prints one line: "<GB/s> <seconds>". Timing covers the opens and the preads.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Chunk {
  size_t file;    // index into the file list
  off_t offset;   // offset inside that file
  size_t bytes;   // request size (the last chunk of a file may be shorter)
  size_t dest;    // offset inside the destination buffer
};

[[noreturn]] void die(const char* what, const std::string& detail) {
  std::fprintf(stderr, "pread_limit: %s %s: %s\n", what, detail.c_str(), std::strerror(errno));
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  size_t request = size_t{16} << 20;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--threads" || arg == "--request") && i + 1 < argc) {
      const char* value = argv[++i];
      if (arg == "--threads") threads = std::atoi(value);
      if (arg == "--request") request = std::strtoull(value, nullptr, 10);
    } else if (arg.starts_with("--")) {
      paths.clear();  // unknown flag: usage
      break;
    } else {
      paths.push_back(arg);
    }
  }
  if (paths.empty() || threads < 1 || request == 0) {
    std::fprintf(stderr, "usage: pread_limit [--threads T] [--request BYTES] FILE...\n");
    return 2;
  }

  // Sizes first (outside the timed span), so the destination can be faulted in before timing.
  std::vector<Chunk> chunks;
  size_t total = 0;
  for (size_t f = 0; f < paths.size(); ++f) {
    struct stat st {};
    if (stat(paths[f].c_str(), &st) != 0) die("stat", paths[f]);
    const auto size = static_cast<size_t>(st.st_size);
    for (size_t at = 0; at < size; at += request) {
      chunks.push_back({f, static_cast<off_t>(at), std::min(request, size - at), total + at});
    }
    total += size;
  }
  if (total == 0) {
    std::fprintf(stderr, "pread_limit: the files are empty\n");
    return 1;
  }
  void* mapped = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) die("mmap", std::to_string(total) + " bytes");
  madvise(mapped, total, MADV_HUGEPAGE);
  auto* dest = static_cast<char*>(mapped);
  std::memset(dest, 0, total);  // fault in: this limit is about reading, not about new memory

  const auto start = std::chrono::steady_clock::now();
  std::vector<int> fds;
  for (const std::string& path : paths) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("open", path);
    fds.push_back(fd);
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < chunks.size(); i = next++) {
        const Chunk& c = chunks[i];
        size_t done = 0;
        while (done < c.bytes) {  // pread may return short counts; finish the request
          const ssize_t got = pread(fds[c.file], dest + c.dest + done, c.bytes - done,
                                    c.offset + static_cast<off_t>(done));
          if (got <= 0) {
            failed = true;
            return;
          }
          done += static_cast<size_t>(got);
        }
      }
    });
  }
  for (std::thread& t : pool) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const int fd : fds) close(fd);
  if (failed) {
    std::fprintf(stderr, "pread_limit: a read failed or ended early\n");
    return 1;
  }
  std::printf("%.3f %.4f\n", static_cast<double>(total) / seconds / 1e9, seconds);
  munmap(mapped, total);
  return 0;
}
