#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "shardload/safetensors.h"

namespace shardload::load {

// Owns a file descriptor (-1: none).
class UniqueFd {
 public:
  UniqueFd() = default;
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  void reset(int fd = -1);
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// A read-only shared mapping of file bytes [offset, offset + bytes), widened to whole 2 MiB
// blocks so that the page cache's huge folios map as huge pages. Nothing is checked against the
// file's size: a read past its end raises SIGBUS (see sigbus_guard.h).
class MappedRange {
 public:
  MappedRange() = default;
  ~MappedRange();
  MappedRange(const MappedRange&) = delete;
  MappedRange& operator=(const MappedRange&) = delete;
  bool map(int fd, uint64_t offset, uint64_t bytes);  // false: the kernel refused (data() null)
  const std::byte* data() const { return data_; }     // the byte at `offset`

 private:
  void* base_ = nullptr;
  size_t length_ = 0;
  const std::byte* data_ = nullptr;
};

// Whether the file's cached pages map as 2 MiB pages (the page cache holds them in 2 MiB folios, as
// readahead of a sequential read leaves them): 4 MiB from the middle of the file are mapped and
// touched, and the thread's page faults counted (2 with huge mappings, 64 or more without).
// Copying out of such a mapping is a plain memcpy, cheaper than a read's per-folio walk; out of
// 4 KiB mappings every 64 KiB is a page fault. Touches only cached pages' mappings when the file is
// cached (the caller's condition); false for files under 8 MiB.
bool maps_as_huge_pages(const SafetensorsFile& file);

// The same for a checkpoint's files, judged on at most 4 of them spread over the list (files read
// the same way are cached the same way; a probe costs up to 64 page faults); false for no files.
bool maps_as_huge_pages(const std::vector<const SafetensorsFile*>& files);

// Fraction of the files' bytes now in the page cache; nothing is read or faulted. Through
// cachestat(2) (one call per file), or where the kernel lacks it (before 6.5) mincore over a
// mapping, which walks every page: ~10 ms per GB here. Files neither can query count as not cached.
double page_cache_fraction(const std::vector<const SafetensorsFile*>& files);

// Whether at least half of the files' bytes are in the page cache: the loaders' --io auto reads
// through the cache then, and with O_DIRECT otherwise.
inline bool mostly_cached(const std::vector<const SafetensorsFile*>& files) {
  return page_cache_fraction(files) >= 0.5;
}

// Bytes of the file in the page cache; nullopt where the call is refused.
std::optional<uint64_t> cached_bytes_cachestat(int fd);
std::optional<uint64_t> cached_bytes_mincore(int fd, uint64_t size);

}  // namespace shardload::load
