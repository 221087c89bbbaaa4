#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace shardload::format {

// A safetensors file starts with the header's byte length as a little-endian uint64.
inline constexpr uint64_t kLengthBytes = 8;

inline uint64_t load_length(const std::byte* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes[i]);
  return value;
}

inline std::array<std::byte, kLengthBytes> store_length(uint64_t value) {
  std::array<std::byte, kLengthBytes> bytes{};
  for (auto& byte : bytes) {
    byte = static_cast<std::byte>(value & 0xFF);
    value >>= 8;
  }
  return bytes;
}

}  // namespace shardload::format
