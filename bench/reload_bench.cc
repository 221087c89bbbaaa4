// Expert reload from a second checkpoint in the page cache (issue 5's benchmark): end-to-end GB/s
// of the changed bytes, the commit alone and the commit pause (how long the sequence word would be
// odd), beside the limits measured in the same run, interleaved: a 2-thread memcpy between two buffers
// already faulted in, and the copy of the changed tensors out of the page cache into a faulted buffer
// with pread() and with memcpy out of a fresh mapping (an update has to copy its bytes out of the page
// cache at least once; bench/pread_limit's large, dynamically shared reads are the other estimate).
//   reload_bench MODEL_A MODEL_B [--tp T] [--ep E] [--runs N] [--filter SUBSTRING] [--staging-bytes
//   B]
// After one unmeasured update, each run updates the live weights alternately from B and from A, so every
// run changes the bytes.
// --double-buffer 1: the live model gets a second buffer per rank (LiveModel::spare, a copy faulted in
// as the weight server's second slot is), so each update is read once into it and committed by a swap.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "shardload/checkpoint.h"
#include "shardload/reload.h"
#include "shardload/tensor.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

void parallel_copy(std::byte* dst, const std::byte* src, size_t bytes, int threads) {
  std::vector<std::thread> pool;
  constexpr size_t kPage = shardload::kPageBytes;
  const size_t per = (bytes / static_cast<size_t>(threads) + kPage - 1) / kPage * kPage;
  for (int t = 0; t < threads; ++t) {
    const size_t begin = std::min(bytes, per * static_cast<size_t>(t));
    const size_t end = std::min(bytes, begin + per);
    pool.emplace_back([=] { std::memcpy(dst + begin, src + begin, end - begin); });
  }
  for (std::thread& t : pool) t.join();
}

// The source side's limits: `threads` threads copy every tensor of `model` whose name contains `filter`
// (in the page cache) into one faulted buffer, in 16 MiB pieces, with pread() or (`mapped`) with memcpy
// out of a fresh mapping of each file (what the loader does when the page cache holds the files in huge
// pages), as an update opens the checkpoint anew. Returns GB/s.
double copy_sources(const std::string& model, const std::string& filter, std::byte* dst, uint64_t capacity,
                    int threads, bool mapped) {
  struct Read {
    int fd;
    uint64_t offset, bytes, dest;
  };
  const shardload::Checkpoint checkpoint = shardload::Checkpoint::open(model);
  std::vector<Read> reads;
  uint64_t total = 0;
  for (const shardload::SafetensorsFile& file : checkpoint.files()) {
    for (const shardload::TensorInfo& t : file.header().tensors) {
      if (t.name.find(filter) == std::string::npos) continue;
      for (uint64_t at = 0; at < t.nbytes(); at += uint64_t{16} << 20) {
        const uint64_t n = std::min<uint64_t>(uint64_t{16} << 20, t.nbytes() - at);
        reads.push_back({file.fd(), file.header().data_start + t.begin + at, n, total});
        total += n;
      }
    }
  }
  if (total > capacity) {
    std::fprintf(stderr, "reload_bench: the sources (%llu bytes) are larger than the changed bytes\n",
                 static_cast<unsigned long long>(total));
    std::exit(1);
  }
  const double t0 = now();
  std::vector<std::pair<const std::byte*, size_t>> maps;
  if (mapped) {
    for (const shardload::SafetensorsFile& file : checkpoint.files()) {
      void* m = ::mmap(nullptr, file.file_size(), PROT_READ, MAP_SHARED, file.fd(), 0);
      if (m == MAP_FAILED) std::abort();
      maps.emplace_back(static_cast<const std::byte*>(m), file.file_size());
    }
  }
  std::vector<int> fds;
  for (const shardload::SafetensorsFile& file : checkpoint.files()) fds.push_back(file.fd());
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); i < reads.size(); i += static_cast<size_t>(threads)) {
        const Read& r = reads[i];
        if (mapped) {
          const size_t f = static_cast<size_t>(std::find(fds.begin(), fds.end(), r.fd) - fds.begin());
          std::memcpy(dst + r.dest, maps[f].first + r.offset, r.bytes);
        } else if (::pread(r.fd, dst + r.dest, r.bytes, static_cast<off_t>(r.offset)) !=
                   static_cast<ssize_t>(r.bytes)) {
          std::abort();
        }
      }
    });
  }
  for (std::thread& t : pool) t.join();
  for (const auto& [m, size] : maps) ::munmap(const_cast<std::byte*>(m), size);
  return static_cast<double>(total) / (now() - t0) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: reload_bench MODEL_A MODEL_B [--tp T] [--ep E] [--runs N] [--filter S] "
                 "[--staging-bytes B]\n");
    return 2;
  }
  const std::string a = argv[1];
  const std::string b = argv[2];
  shardload::ParallelConfig parallel;
  int runs = 5;
  std::string filter = "mlp.experts.";
  uint64_t staging = 0;
  bool keep = false;
  bool double_buffer = false;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const char* value = argv[i + 1];
    if (key == "--tp")
      parallel.tp = std::atoi(value);
    else if (key == "--ep")
      parallel.ep = std::atoi(value);
    else if (key == "--runs")
      runs = std::atoi(value);
    else if (key == "--filter")
      filter = value;
    else if (key == "--double-buffer")
      double_buffer = std::string(value) == "1";
    else if (key == "--keep-staging")
      keep = std::string(value) == "1";
    else if (key == "--staging-bytes")
      staging = std::strtoull(value, nullptr, 10);
  }
  constexpr int kThreads = 2;
  shardload::LoadOptions load_options;
  load_options.threads = kThreads;
  shardload::LiveModel live = shardload::load_live(a, parallel, load_options);
  if (double_buffer) {
    for (const shardload::RankWeights& rank : live.ranks) {
      live.spare.buffers.emplace_back(rank.buffer.size());
      std::memcpy(live.spare.buffers.back().data(), rank.buffer.data(), rank.buffer.size());
    }
  }

  uint64_t expert_bytes = 0;
  for (const shardload::RankPlan& rank : live.plan.ranks) {
    for (const shardload::PlanParam& p : rank.params) {
      if (p.name.find(filter) != std::string::npos) expert_bytes += p.nbytes;
    }
  }
  // The baseline: both buffers faulted in before timing, as live weights and a reused staging area
  // are.
  shardload::AlignedBuffer from(expert_bytes);
  shardload::AlignedBuffer to(expert_bytes);
  std::memset(from.data(), 1, expert_bytes);
  std::memset(to.data(), 2, expert_bytes);

  // One update first, not measured: staging (or the spare) and the memory the VM backs lazily are
  // faulted in once, as in a process that has updated before. It leaves the live weights at A again.
  {
    shardload::UpdateOptions options;
    options.threads = kThreads;
    options.staging_bytes = staging;
    options.keep_staging = keep;
    shardload::update_weights(live, a, {.substrings = {filter}}, options);
  }
  std::vector<double> memcpy_gbs, pread_gbs, mapped_gbs, e2e_gbs, commit_gbs, pause_ms;
  uint64_t changed = 0;
  for (int run = 0; run < runs; ++run) {
    double t0 = now();
    parallel_copy(to.data(), from.data(), expert_bytes, kThreads);
    memcpy_gbs.push_back(static_cast<double>(expert_bytes) / (now() - t0) / 1e9);
    // The checkpoint tensors this run reads (the bytes of its source in the page cache; the same
    // count as the changed bytes when nothing is converted).
    pread_gbs.push_back(copy_sources(run % 2 == 0 ? b : a, filter, to.data(), expert_bytes, kThreads, false));
    mapped_gbs.push_back(copy_sources(run % 2 == 0 ? b : a, filter, to.data(), expert_bytes, kThreads, true));

    shardload::UpdateOptions options;
    options.threads = kThreads;
    options.staging_bytes = staging;
    options.keep_staging = keep;
    t0 = now();
    const shardload::UpdateResult r =
        shardload::update_weights(live, run % 2 == 0 ? b : a, {.substrings = {filter}}, options);
    const double seconds = now() - t0;
    changed = r.changed_bytes;
    e2e_gbs.push_back(static_cast<double>(r.changed_bytes) / seconds / 1e9);
    commit_gbs.push_back(static_cast<double>(r.changed_bytes) / r.seconds_commit / 1e9);
    pause_ms.push_back(r.max_pause_seconds * 1e3);
    std::printf(
        "run %d: memcpy %.2f GB/s, pread %.2f GB/s, mapped %.2f GB/s, reload %.3f s end to end (%.2f GB/s), commit %.3f s (%.2f "
        "GB/s), "
        "pause %.3f ms, groups %llu, synced %llu bytes, version %llu\n",
        run, memcpy_gbs.back(), pread_gbs.back(), mapped_gbs.back(), seconds, e2e_gbs.back(), r.seconds_commit, commit_gbs.back(),
        pause_ms.back(), static_cast<unsigned long long>(r.groups),
        static_cast<unsigned long long>(r.synced_bytes), static_cast<unsigned long long>(r.version));
  }
  const double base = median(memcpy_gbs);
  std::printf(
      "model %s -> %s, tp %d ep %d, filter '%s', changed bytes %llu (%d runs, medians, %d "
      "threads)\n",
      a.c_str(), b.c_str(), parallel.tp, parallel.ep, filter.c_str(),
      static_cast<unsigned long long>(changed), runs, kThreads);
  std::printf("%-28s %8s %8s\n", "", "GB/s", "ratio");
  std::printf("%-28s %8.2f %8.2f\n", "memcpy, faulted buffers", base, 1.0);
  std::printf("%-28s %8.2f %8.2f\n", "pread of the sources", median(pread_gbs), median(pread_gbs) / base);
  std::printf("%-28s %8.2f %8.2f\n", "memcpy out of a mapping", median(mapped_gbs), median(mapped_gbs) / base);
  const double source = std::max(median(pread_gbs), median(mapped_gbs));
  std::printf("%-28s %8.2f %8.2f\n", "expert reload, end to end", median(e2e_gbs),
              median(e2e_gbs) / base);
  std::printf("%-28s %8.2f %8.2f\n", "commit", median(commit_gbs), median(commit_gbs) / base);
  std::printf("commit pause (sequence word odd), median %.3f ms, max %.3f ms\n", median(pause_ms),
              *std::max_element(pause_ms.begin(), pause_ms.end()));
  // Above 1 when the update's own reads (the loader's, large and spread over threads) beat these simple
  // copies: then they only bound the page cache's rate from below.
  std::printf("end to end / the faster of those two copies out of the page cache: %.2f\n", median(e2e_gbs) / source);
  return 0;
}
