// A second process reading `serve --device cuda`'s weights on the GPU through CUDA IPC, as an
// engine would: it opens every rank's handle from manifest.json ("cuda") once, then reads device
// memory between two reads of the rank's sequence word in host shared memory (a seqlock snapshot)
// and checks that the GPU bytes are the host shared memory's. With --wait-version V it then waits
// for the server to publish version V (an update sent meanwhile) and checks again, through the same
// opened handles: the update is seen in place, without reopening anything.
//   gpu_ipc_client DIR [--wait-version V] [--timeout SECONDS]
// Prints one line per check; exit status 0 when every check passed, 1 otherwise.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "device/cuda.h"
#include "shardload/loader.h"
#include "shardload/serve.h"

namespace {

using shardload::device::cuda::DevicePtr;

struct Rank {
  int rank = 0;
  int device = 0;
  uint64_t bytes = 0;
  DevicePtr ptr = 0;
  const std::byte* file = nullptr;  // the whole rank file, mapped read-only
  size_t file_bytes = 0;
};

uint64_t load_word(const std::byte* header, uint64_t offset) {
  return std::atomic_ref<const uint64_t>(*reinterpret_cast<const uint64_t*>(header + offset))
      .load(std::memory_order_acquire);
}

shardload::device::cuda::IpcHandle from_hex(const std::string& hex) {
  shardload::device::cuda::IpcHandle out{};
  if (hex.size() != 2 * out.size()) throw std::runtime_error("bad ipc_handle length");
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return out;
}

// A consistent copy of the rank's device bytes and of its host bytes, read inside one even
// sequence window. Returns the XXH3 of the device bytes; `equal` tells whether both agree.
std::string snapshot(const Rank& r, bool& equal, uint64_t& sequence) {
  std::vector<std::byte> device(r.bytes);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const uint64_t before = load_word(r.file, shardload::kShmSequenceOffset);
    if (before % 2 != 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    shardload::device::cuda::copy_d2h(r.device, device.data(), r.ptr, r.bytes);
    equal = std::memcmp(device.data(), r.file + shardload::kShmHeaderBytes, r.bytes) == 0;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (load_word(r.file, shardload::kShmSequenceOffset) == before) {
      sequence = before;
      return shardload::xxh3_hex(device);
    }
  }
  throw std::runtime_error("no consistent snapshot in 1000 tries");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gpu_ipc_client DIR [--wait-version V] [--timeout SECONDS]\n");
    return 2;
  }
  const std::string dir = argv[1];
  uint64_t wait_version = 0;
  double timeout = 60;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--wait-version") wait_version = std::stoull(argv[i + 1]);
    if (arg == "--timeout") timeout = std::stod(argv[i + 1]);
  }
  try {
    nlohmann::json manifest = nlohmann::json::parse(std::ifstream(dir + "/manifest.json"));
    if (!manifest.contains("cuda")) {
      std::printf("FAIL: manifest.json has no \"cuda\" member (serve without --device cuda?)\n");
      return 1;
    }
    const nlohmann::json& cuda = manifest["cuda"];
    std::vector<Rank> ranks;
    for (size_t i = 0; i < cuda["ranks"].size(); ++i) {
      const nlohmann::json& entry = cuda["ranks"][i];
      Rank r;
      r.rank = entry["rank"].get<int>();
      r.device = entry["device"].get<int>();
      r.bytes = entry["bytes"].get<uint64_t>();
      r.ptr = shardload::device::cuda::ipc_open(r.device, from_hex(entry["ipc_handle"]));
      const std::string path = dir + "/" + manifest["ranks"][i]["file"].get<std::string>();
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      struct stat st {};
      if (fd < 0 || ::fstat(fd, &st) != 0) throw std::runtime_error("cannot open " + path);
      r.file_bytes = static_cast<size_t>(st.st_size);
      void* map = ::mmap(nullptr, r.file_bytes, PROT_READ, MAP_SHARED, fd, 0);
      ::close(fd);
      if (map == MAP_FAILED) throw std::runtime_error("cannot map " + path);
      r.file = static_cast<const std::byte*>(map);
      if (r.file_bytes < shardload::kShmHeaderBytes + r.bytes)
        throw std::runtime_error("short rank file");
      ranks.push_back(r);
    }
    bool ok = true;
    std::vector<std::string> first;
    const uint64_t version = load_word(ranks.at(0).file, shardload::kShmVersionOffset);
    for (const Rank& r : ranks) {
      bool equal = false;
      uint64_t sequence = 0;
      first.push_back(snapshot(r, equal, sequence));
      std::printf(
          "%s: rank %d on GPU %d through IPC: %llu bytes, xxh3 %s, version %llu, equal to "
          "host shared memory: %s\n",
          equal ? "ok" : "FAIL", r.rank, r.device, static_cast<unsigned long long>(r.bytes),
          first.back().c_str(), static_cast<unsigned long long>(version), equal ? "yes" : "NO");
      ok = ok && equal;
    }
    if (wait_version > 0) {
      std::printf("waiting for version %llu\n", static_cast<unsigned long long>(wait_version));
      std::fflush(stdout);
      const auto start = std::chrono::steady_clock::now();
      for (;;) {
        const std::byte* h = ranks[0].file;
        if (load_word(h, shardload::kShmVersionOffset) >= wait_version &&
            load_word(h, shardload::kShmUpdateFlagOffset) == 0)
          break;
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
            timeout) {
          std::printf("FAIL: version %llu not published in %.0f s\n",
                      static_cast<unsigned long long>(wait_version), timeout);
          return 1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      bool changed = false;
      for (size_t i = 0; i < ranks.size(); ++i) {
        bool equal = false;
        uint64_t sequence = 0;
        const std::string now = snapshot(ranks[i], equal, sequence);
        changed = changed || now != first[i];
        std::printf(
            "%s: after the update, rank %d through the same handle: xxh3 %s (was %s), "
            "equal to host shared memory: %s\n",
            equal ? "ok" : "FAIL", ranks[i].rank, now.c_str(), first[i].c_str(),
            equal ? "yes" : "NO");
        ok = ok && equal;
      }
      std::printf("%s: the update %s seen in place on the GPU\n", changed ? "ok" : "FAIL",
                  changed ? "was" : "was NOT");
      ok = ok && changed;
    }
    for (const Rank& r : ranks) shardload::device::cuda::ipc_close(r.device, r.ptr);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}
