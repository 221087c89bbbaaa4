#pragma once

// The bytes of a safetensors file made by hand, for tests of readers given files the writer would
// never make: the header's length as 8 little-endian bytes, the header text, then the data section.

#include <cstdint>
#include <string>
#include <string_view>

namespace shardload::testing {

inline std::string safetensors_bytes(std::string_view header, std::string_view data = {}) {
  std::string out(8, '\0');
  for (size_t i = 0; i < 8; ++i) {
    out[i] = static_cast<char>((uint64_t{header.size()} >> (8 * i)) & 0xFF);
  }
  out += header;
  out += data;
  return out;
}

// A file whose data section is `data_bytes` zero bytes.
inline std::string safetensors_file(std::string_view header, size_t data_bytes = 0) {
  return safetensors_bytes(header, std::string(data_bytes, '\0'));
}

}  // namespace shardload::testing
