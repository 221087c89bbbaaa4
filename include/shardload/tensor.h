#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "shardload/dtype.h"

namespace shardload {

using Shape = std::vector<uint64_t>;

// Number of elements of a shape (1 for a scalar). Throws Error(kShapeOverflow) when it overflows uint64.
uint64_t shape_numel(const Shape& shape);
// Bytes of a tensor of that shape and dtype; throws Error(kShapeOverflow) on overflow and
// Error(kSizeMismatch) when a sub-byte dtype does not fill whole bytes.
uint64_t shape_nbytes(const Shape& shape, DType dtype);

// A non-owning view of a tensor's bytes.
struct TensorView {
  DType dtype = DType::kU8;
  Shape shape;
  std::span<const std::byte> data;
};

// Memory pages as buffers, mappings and madvise see them: the base page of x86-64 and arm64 Linux,
// and a transparent huge page (also the largest page-cache folio).
inline constexpr size_t kPageBytes = 4096;
inline constexpr size_t kHugePageBytes = size_t{2} << 20;
// AlignedBuffers of this size and more are anonymous mappings (their pages can be given back with madvise).
inline constexpr size_t kMappedBufferBytes = kHugePageBytes;

// An owning, zero-initialised buffer aligned to `alignment` bytes (a power of two, default a page so that
// O_DIRECT reads fit). Buffers of kMappedBufferBytes and more are anonymous mappings on a huge-page boundary,
// advised for transparent huge pages, whose pages the kernel zeroes on first touch (no memset pass). Move-only.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t size, size_t alignment = kPageBytes);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // A shared mapping of `size` bytes of the file `fd` from `offset` (a multiple of the page size), e.g. a
  // rank file in /dev/shm that other processes map too. Writes go to the file; the mapping is released
  // like any buffer. Throws Error(kIo).
  static AlignedBuffer map_file(int fd, uint64_t offset, size_t size);

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<std::byte> span() { return {data_, size_}; }
  std::span<const std::byte> span() const { return {data_, size_}; }

 private:
  void release();

  std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // > 0: an mmap of that many bytes, else malloc'd
};

}  // namespace shardload
