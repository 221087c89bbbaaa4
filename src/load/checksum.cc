#include <xxhash.h>

#include <fmt/format.h>

#include "shardload/loader.h"

namespace shardload {

std::string xxh3_hex(std::span<const std::byte> bytes) {
  return fmt::format("{:016x}", XXH3_64bits(bytes.data(), bytes.size()));
}

}  // namespace shardload
