#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace shardload::checkpoint {

// model.safetensors.index.json's weight_map: tensor name -> shard file (a plain name inside the
// model directory), sorted by tensor name.
struct WeightMap {
  std::vector<std::string> shards;                        // distinct file names, sorted
  std::vector<std::pair<std::string, uint32_t>> tensors;  // (name, index into shards)

  // The shard index of a tensor, or -1.
  int64_t shard_of(std::string_view name) const;
};

// Reads the index with simdjson on demand (a MoE index names ~20k tensors in ~2 MB; a document
// tree costs ~15 ms there).
// Throws Error(kIndex) naming the file (and tensor) for invalid JSON, no weight_map object, a value
// that is not a string, or a value that is a path rather than a file name.
WeightMap read_weight_map(const std::string& index_path);

}  // namespace shardload::checkpoint
