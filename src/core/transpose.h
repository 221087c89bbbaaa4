#pragma once

#include <cstddef>
#include <cstdint>

namespace shardload {

// `in`, a row-major [rows, cols] matrix of `element_size`-byte elements (1, 2 or 4), transposed
// into `out` ([cols, rows]; the two must not overlap), over `threads` threads (0: one per core).
// Bytes (FP8 weights) go in 8x8 blocks through 64-bit words.
void transpose(const std::byte* in, std::byte* out, uint64_t rows, uint64_t cols,
               size_t element_size, int threads = 0);

}  // namespace shardload
