#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tiny/tiny_model.h"

namespace shardload::tiny {

// One tensor to fill: `out` is exactly its shape x dtype bytes.
struct FillJob {
  const TensorSpec* spec = nullptr;
  std::span<std::byte> out;
};

// Fills every job with small, normal-ish values (weights and biases around 0, norms around 1),
// drawn from a stream keyed by (seed, tensor name, chunk), so that each tensor differs from every
// other, and the bytes do not depend on the thread count. Uses up to `threads` threads (0: one per
// core).
void fill_values(std::span<const FillJob> jobs, uint64_t seed, unsigned threads = 0);

}  // namespace shardload::tiny
