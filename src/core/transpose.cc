#include "core/transpose.h"

#include <algorithm>
#include <cstring>

#include "core/parallel_for.h"
#include "shardload/error.h"

namespace shardload {
namespace {

constexpr uint64_t kTile = 64;  // a tile's rows and columns stay in the first-level cache

// Rows [r0, r1) by columns [c0, c1), one element at a time.
template <class T>
void transpose_tile(const std::byte* in, std::byte* out, uint64_t rows, uint64_t cols, uint64_t r0,
                    uint64_t r1, uint64_t c0, uint64_t c1) {
  for (uint64_t r = r0; r < r1; ++r) {
    for (uint64_t c = c0; c < c1; ++c) {
      T value;
      std::memcpy(&value, in + (r * cols + c) * sizeof(T), sizeof(T));
      std::memcpy(out + (c * rows + r) * sizeof(T), &value, sizeof(T));
    }
  }
}

// The 8x8 byte block at (r, c): its rows read as 64-bit words (byte j: column j), then the 4x4,
// 2x2 and 1x1 sub-blocks off the diagonal swapped, each level at once over the whole block.
void transpose_block8(const std::byte* in, std::byte* out, uint64_t rows, uint64_t cols, uint64_t r,
                      uint64_t c) {
  uint64_t x[8];
  for (int i = 0; i < 8; ++i) std::memcpy(&x[i], in + (r + i) * cols + c, 8);
  for (int i = 0; i < 4; ++i) {
    const uint64_t a = x[i], b = x[i + 4];
    x[i] = (a & 0x00000000FFFFFFFFull) | (b << 32);
    x[i + 4] = (a >> 32) | (b & 0xFFFFFFFF00000000ull);
  }
  for (int i : {0, 1, 4, 5}) {
    const uint64_t a = x[i], b = x[i + 2];
    x[i] = (a & 0x0000FFFF0000FFFFull) | ((b & 0x0000FFFF0000FFFFull) << 16);
    x[i + 2] = ((a >> 16) & 0x0000FFFF0000FFFFull) | (b & 0xFFFF0000FFFF0000ull);
  }
  for (int i : {0, 2, 4, 6}) {
    const uint64_t a = x[i], b = x[i + 1];
    x[i] = (a & 0x00FF00FF00FF00FFull) | ((b & 0x00FF00FF00FF00FFull) << 8);
    x[i + 1] = ((a >> 8) & 0x00FF00FF00FF00FFull) | (b & 0xFF00FF00FF00FF00ull);
  }
  for (int j = 0; j < 8; ++j) std::memcpy(out + (c + j) * rows + r, &x[j], 8);
}

void transpose_bytes_tile(const std::byte* in, std::byte* out, uint64_t rows, uint64_t cols,
                          uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1) {
  const uint64_t r8 = r0 + (r1 - r0) / 8 * 8;
  const uint64_t c8 = c0 + (c1 - c0) / 8 * 8;
  for (uint64_t r = r0; r < r8; r += 8) {
    for (uint64_t c = c0; c < c8; c += 8) transpose_block8(in, out, rows, cols, r, c);
  }
  transpose_tile<uint8_t>(in, out, rows, cols, r0, r8, c8, c1);  // the columns past the 8x8 blocks
  transpose_tile<uint8_t>(in, out, rows, cols, r8, r1, c0, c1);  // the rows past them
}

}  // namespace

void transpose(const std::byte* in, std::byte* out, uint64_t rows, uint64_t cols,
               size_t element_size, int threads) {
  if (element_size != 1 && element_size != 2 && element_size != 4) {
    throw Error(ErrorKind::kInvalidArgument, "only 1, 2 or 4-byte elements are transposed",
                {.expected = "1, 2 or 4", .found = std::to_string(element_size)});
  }
  const uint64_t bands = (rows + kTile - 1) / kTile;
  parallel_for(static_cast<size_t>(bands), threads, [&](size_t band, int) {
    const uint64_t r0 = band * kTile;
    const uint64_t r1 = std::min(rows, r0 + kTile);
    for (uint64_t c0 = 0; c0 < cols; c0 += kTile) {
      const uint64_t c1 = std::min(cols, c0 + kTile);
      if (element_size == 1) transpose_bytes_tile(in, out, rows, cols, r0, r1, c0, c1);
      if (element_size == 2) transpose_tile<uint16_t>(in, out, rows, cols, r0, r1, c0, c1);
      if (element_size == 4) transpose_tile<uint32_t>(in, out, rows, cols, r0, r1, c0, c1);
    }
  });
}

}  // namespace shardload
