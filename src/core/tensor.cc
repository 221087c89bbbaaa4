#include "shardload/tensor.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include <fmt/format.h>

#include "core/shape_text.h"
#include "shardload/error.h"

namespace shardload {

std::string shape_text(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

uint64_t shape_numel(const Shape& shape) {
  uint64_t numel = 1;
  for (uint64_t dim : shape) {
    if (__builtin_mul_overflow(numel, dim, &numel)) {
      throw Error(ErrorKind::kShapeOverflow, "element count overflows 64 bits",
                  {.field = "shape", .found = shape_text(shape)});
    }
  }
  return numel;
}

uint64_t shape_nbytes(const Shape& shape, DType dtype) {
  uint64_t bits = 0;
  if (__builtin_mul_overflow(shape_numel(shape), static_cast<uint64_t>(dtype_bits(dtype)), &bits)) {
    throw Error(ErrorKind::kShapeOverflow, "byte size overflows 64 bits",
                {.field = "shape", .found = shape_text(shape)});
  }
  if (bits % 8 != 0) {
    throw Error(ErrorKind::kSizeMismatch,
                fmt::format("{} elements of {} do not fill whole bytes", shape_numel(shape), dtype_name(dtype)),
                {.field = "shape", .found = fmt::format("{} bits", bits)});
  }
  return bits / 8;
}

namespace {

size_t round_up_to_page(size_t bytes) { return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes; }

}  // namespace

// Large buffers (kMappedBufferBytes and more) come straight from the kernel: its pages are zero when
// first touched, so no memset pass is needed, and they are advised for transparent huge pages, which
// makes first-touch faults 512x rarer.
AlignedBuffer::AlignedBuffer(size_t size, size_t alignment) : size_(size) {
  if (size == 0) return;
  if (size >= kMappedBufferBytes && alignment <= kHugePageBytes) {
    // Over-map by one huge page and trim, so that the buffer starts on a huge-page boundary.
    mapped_ = size + kHugePageBytes;
    void* raw = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (start + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
    if (aligned > start) munmap(raw, aligned - start);
    const size_t kept = round_up_to_page(size);
    const uintptr_t end = start + mapped_;
    if (end > aligned + kept) munmap(reinterpret_cast<void*>(aligned + kept), end - aligned - kept);
    mapped_ = kept;
    data_ = reinterpret_cast<std::byte*>(aligned);
    madvise(data_, mapped_, MADV_HUGEPAGE);
    return;
  }
  const size_t rounded = (size + alignment - 1) / alignment * alignment;
  data_ = static_cast<std::byte*>(std::aligned_alloc(alignment, rounded));
  if (data_ == nullptr) throw std::bad_alloc();
  std::memset(data_, 0, size);
}

AlignedBuffer AlignedBuffer::map_file(int fd, uint64_t offset, size_t size) {
  AlignedBuffer out;
  if (size == 0) return out;
  const size_t mapped = round_up_to_page(size);
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
  if (raw == MAP_FAILED) {
    throw Error(ErrorKind::kIo, fmt::format("mmap of {} bytes at offset {} failed: {}", size, offset,
                                            std::strerror(errno)));
  }
  out.data_ = static_cast<std::byte*>(raw);
  out.size_ = size;
  out.mapped_ = mapped;
  return out;
}

void AlignedBuffer::release() {
  if (data_ == nullptr) return;
  if (mapped_ > 0) {
    munmap(data_, mapped_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  size_ = 0;
  mapped_ = 0;
}

AlignedBuffer::~AlignedBuffer() { release(); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

}  // namespace shardload
