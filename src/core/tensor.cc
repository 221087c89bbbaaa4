#include "shardload/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include <fmt/format.h>

#include "shardload/error.h"

namespace shardload {

uint64_t shape_numel(const Shape& shape) {
  uint64_t numel = 1;
  for (uint64_t dim : shape) {
    if (__builtin_mul_overflow(numel, dim, &numel)) {
      throw Error(ErrorKind::kShapeOverflow, "element count overflows 64 bits",
                  {.field = "shape", .found = fmt::format("[{}]", fmt::join(shape, ", "))});
    }
  }
  return numel;
}

uint64_t shape_nbytes(const Shape& shape, DType dtype) {
  uint64_t bits = 0;
  if (__builtin_mul_overflow(shape_numel(shape), static_cast<uint64_t>(dtype_bits(dtype)), &bits)) {
    throw Error(ErrorKind::kShapeOverflow, "byte size overflows 64 bits",
                {.field = "shape", .found = fmt::format("[{}]", fmt::join(shape, ", "))});
  }
  if (bits % 8 != 0) {
    throw Error(ErrorKind::kSizeMismatch,
                fmt::format("{} elements of {} do not fill whole bytes", shape_numel(shape), dtype_name(dtype)),
                {.field = "shape", .found = fmt::format("{} bits", bits)});
  }
  return bits / 8;
}

AlignedBuffer::AlignedBuffer(size_t size, size_t alignment) : size_(size) {
  if (size == 0) return;
  const size_t rounded = (size + alignment - 1) / alignment * alignment;
  data_ = static_cast<std::byte*>(std::aligned_alloc(alignment, rounded));
  if (data_ == nullptr) throw std::bad_alloc();
  std::memset(data_, 0, size);
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace shardload
