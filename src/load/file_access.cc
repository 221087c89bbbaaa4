#include "load/file_access.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "format/posix_io.h"
#include "load/sigbus_guard.h"
#include "shardload/tensor.h"

namespace shardload::load {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

MappedRange::~MappedRange() {
  if (base_ != nullptr) ::munmap(base_, length_);
}

bool MappedRange::map(int fd, uint64_t offset, uint64_t bytes) {
  // Widened to whole huge pages, the largest page-cache folio, so that such folios map as huge pages.
  constexpr uint64_t kHuge = kHugePageBytes;
  const uint64_t first = offset / kHuge * kHuge;
  length_ = static_cast<size_t>((offset + bytes - first + kHuge - 1) / kHuge * kHuge);
  void* p = ::mmap(nullptr, length_, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(first));
  if (p == MAP_FAILED) return false;
  base_ = p;
  data_ = static_cast<const std::byte*>(p) + (offset - first);
  return true;
}

namespace {

// cachestat(2), Linux 6.5+; Debian 12's headers predate it, so the layout is spelled out here.
constexpr long kCachestatSyscall = 451;
struct CachestatRange {
  uint64_t off;
  uint64_t len;  // 0: to the end of the file
};
struct Cachestat {
  uint64_t nr_cache;  // pages
  uint64_t nr_dirty;
  uint64_t nr_writeback;
  uint64_t nr_evicted;
  uint64_t nr_recently_evicted;
};

}  // namespace

std::optional<uint64_t> cached_bytes_cachestat(int fd) {
  CachestatRange range{0, 0};
  Cachestat stat{};
  if (::syscall(kCachestatSyscall, fd, &range, &stat, 0) != 0) return std::nullopt;
  return stat.nr_cache * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::optional<uint64_t> cached_bytes_mincore(int fd, uint64_t size) {
  if (size == 0) return 0;
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return std::nullopt;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((size + page - 1) / page, 0);
  std::optional<uint64_t> cached;
  if (::mincore(p, size, resident.data()) == 0) {
    cached = 0;
    for (unsigned char r : resident) *cached += (r & 1) != 0 ? page : 0;
  }
  ::munmap(p, size);
  return cached;
}

bool maps_as_huge_pages(const SafetensorsFile& file) {
  constexpr uint64_t kProbe = 2 * kHugePageBytes;
  if (file.file_size() < 2 * kProbe) return false;
  const uint64_t offset = file.file_size() / 2 / kHugePageBytes * kHugePageBytes;
  MappedRange range;
  if (!range.map(file.fd(), offset, kProbe)) return false;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  rusage before{};
  rusage after{};
  const bool touched = read_mapped_guarded(range.data(), kProbe, [&] {
    ::getrusage(RUSAGE_THREAD, &before);
    for (uint64_t at = 0; at < kProbe; at += page) {
      (void)*reinterpret_cast<const volatile unsigned char*>(range.data() + at);
    }
    ::getrusage(RUSAGE_THREAD, &after);
  });
  if (!touched) return false;  // the file shrank since it was opened: the load will say so
  const long faults = after.ru_minflt + after.ru_majflt - before.ru_minflt - before.ru_majflt;
  return faults <= static_cast<long>(kProbe / kHugePageBytes);
}

bool maps_as_huge_pages(const std::vector<const SafetensorsFile*>& files) {
  constexpr size_t kProbes = 4;
  const size_t step = std::max<size_t>(1, (files.size() + kProbes - 1) / kProbes);
  for (size_t i = 0; i < files.size(); i += step) {
    if (!maps_as_huge_pages(*files[i])) return false;
  }
  return !files.empty();
}

double page_cache_fraction(const std::vector<const SafetensorsFile*>& files) {
  uint64_t total = 0;
  uint64_t cached = 0;
  for (const SafetensorsFile* file : files) {
    const uint64_t size = file->file_size();
    total += size;
    std::optional<uint64_t> bytes = cached_bytes_cachestat(file->fd());
    if (!bytes) bytes = cached_bytes_mincore(file->fd(), size);
    cached += std::min(bytes.value_or(0), size);
  }
  return total == 0 ? 1.0 : static_cast<double>(cached) / static_cast<double>(total);
}

}  // namespace shardload::load
