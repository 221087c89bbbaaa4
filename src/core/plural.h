#pragma once

#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace shardload {

// "1 rank", "4 ranks": a count and its noun as people write them (nouns that take an s).
inline std::string count_of(uint64_t n, const char* noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

}  // namespace shardload
