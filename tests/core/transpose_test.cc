#include "core/transpose.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "shardload/error.h"

namespace shardload {
namespace {

// Bytes of no pattern a wrong shift or mask could keep (an index's low byte has the parity of its
// row and column, which hides some).
std::vector<std::byte> scrambled(uint64_t count, size_t size) {
  std::vector<std::byte> out(count * size);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (std::byte& b : out) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    b = static_cast<std::byte>(state >> 24);
  }
  return out;
}

std::vector<std::byte> naive(const std::vector<std::byte>& in, uint64_t rows, uint64_t cols,
                             size_t size) {
  std::vector<std::byte> out(in.size());
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) {
      std::memcpy(out.data() + (c * rows + r) * size, in.data() + (r * cols + c) * size, size);
    }
  }
  return out;
}

// Shapes around the 8x8 byte blocks and 64x64 tiles: whole ones, partial ones, a single row or
// column, and empty.
TEST(TransposeTest, EqualsTheElementByElementTransposeForEveryShape) {
  const uint64_t sides[] = {0, 1, 7, 8, 9, 63, 64, 65, 130, 200};
  for (const size_t size : {size_t{1}, size_t{2}, size_t{4}}) {
    for (const uint64_t rows : sides) {
      for (const uint64_t cols : sides) {
        const std::vector<std::byte> in = scrambled(rows * cols, size);
        std::vector<std::byte> out(in.size(), std::byte{0xAA});
        transpose(in.data(), out.data(), rows, cols, size, 2);
        EXPECT_EQ(out, naive(in, rows, cols, size)) << rows << "x" << cols << " of " << size;
      }
    }
  }
}

TEST(TransposeTest, OtherElementSizesAreRefused) {
  std::vector<std::byte> in(64), out(64);
  EXPECT_THROW(transpose(in.data(), out.data(), 2, 4, 8), Error);
  EXPECT_THROW(transpose(in.data(), out.data(), 2, 4, 3), Error);
}

}  // namespace
}  // namespace shardload
