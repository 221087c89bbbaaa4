#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
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
// core). FP8 weights and scales (spec.quant set) are tiny_quant.h's: Error(kInvalidArgument) here.
void fill_values(std::span<const FillJob> jobs, uint64_t seed, unsigned threads = 0);

// The generator's hashing, shared with the FP8 scales: SplitMix64 (advances state) and FNV-1a.
uint64_t splitmix64(uint64_t& state);
uint64_t fnv1a(std::string_view text);

// The state at item `index` of the stream keyed `key` (a hash of seed, name and salt): one
// SplitMix64 step of the key, then `index` strides of an odd constant, so that neighbouring items
// (value chunks, scale blocks) start far apart.
uint64_t stream_start(uint64_t key, uint64_t index);

}  // namespace shardload::tiny
