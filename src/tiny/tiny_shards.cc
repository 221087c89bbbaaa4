#include "tiny/tiny_shards.h"

#include <algorithm>

#include <fmt/format.h>

namespace shardload::tiny {

std::vector<std::vector<size_t>> plan_shards(std::span<const uint64_t> sizes,
                                             uint64_t shard_bytes) {
  uint64_t total = 0;
  for (uint64_t size : sizes) total += size;
  const uint64_t by_size = (total + shard_bytes - 1) / std::max<uint64_t>(shard_bytes, 1);
  const uint64_t wanted = std::min<uint64_t>(sizes.size(), std::max(kMinShards, by_size));
  std::vector<std::vector<size_t>> shards(wanted);
  const double share =
      static_cast<double>(std::max<uint64_t>(total, 1)) / static_cast<double>(wanted);
  uint64_t before = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double middle = static_cast<double>(before) + static_cast<double>(sizes[i]) / 2;
    const auto k = static_cast<uint64_t>(middle / share);
    shards[std::min(k, wanted - 1)].push_back(i);
    before += sizes[i];
  }
  std::erase_if(shards, [](const std::vector<size_t>& shard) { return shard.empty(); });
  return shards;
}

std::string shard_name(size_t k, size_t n) {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, n);
}

}  // namespace shardload::tiny
