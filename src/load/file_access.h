#pragma once

#include <cstddef>
#include <cstdint>
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

// A read-only shared mapping of a whole checkpoint file as it is now, advised for sequential
// reading.
struct MappedFile {
  MappedFile() = default;
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  void map(const SafetensorsFile& file);  // throws Error(kIo)

  const std::byte* data = nullptr;
  uint64_t size = 0;
};

// Fraction of the files' bytes now in the page cache (mincore over a mapping: no page is read or
// faulted). Files that cannot be mapped count as not cached.
double page_cache_fraction(const std::vector<const SafetensorsFile*>& files);

}  // namespace shardload::load
