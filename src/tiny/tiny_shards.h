#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace shardload::tiny {

// At least this many shards, so that even the tiny model exercises cross-file loading...
inline constexpr uint64_t kMinShards = 3;
// ...and shards of at most about this many bytes, so that the count grows with the model as on the
// Hub.
inline constexpr uint64_t kShardBytes = uint64_t{2} << 30;

// Tensor positions per shard, in order, for tensors of `sizes` bytes (in checkpoint order): about
// equal shares; a tensor goes to the share its middle byte falls in, and shares left empty by a
// tensor larger than a share are dropped, so no shard is empty.
std::vector<std::vector<size_t>> plan_shards(std::span<const uint64_t> sizes,
                                             uint64_t shard_bytes = kShardBytes);

// "model-00001-of-00003.safetensors" for k = 0, n = 3.
std::string shard_name(size_t k, size_t n);

}  // namespace shardload::tiny
