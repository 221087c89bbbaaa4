#include "shardload/fp8_quant.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "shardload/convert.h"

namespace shardload {

void requantize_fp8_e4m3(std::span<uint8_t> codes, float from, float to) {
  std::array<uint8_t, 256> table;
  for (int code = 0; code < 256; ++code) {
    const float x = fp8e4m3_to_f32(static_cast<uint8_t>(code)) * from;
    table[static_cast<size_t>(code)] = f32_to_fp8e4m3(x / to);
  }
  for (uint8_t& q : codes) q = table[q];
}

float abs_max(std::span<const float> values) {
  float amax = 0;
  for (float v : values) amax = std::fmax(amax, std::fabs(v));  // fmax drops NaN
  return amax;
}

float quantize_fp8_e4m3(std::span<const float> values, std::span<uint8_t> codes) {
  const float s = std::max(abs_max(values), 1e-12f) / 448.0f;
  // Divided into a cache-sized block, then converted by the vectorized bulk kernel.
  constexpr size_t kBlock = 4096;
  std::array<float, kBlock> scaled;
  for (size_t at = 0; at < values.size(); at += kBlock) {
    const size_t n = std::min(kBlock, values.size() - at);
    for (size_t i = 0; i < n; ++i) scaled[i] = values[at + i] / s;
    convert(DType::kF32, scaled.data(), DType::kF8E4M3, codes.data() + at, n);
  }
  return s;
}

}  // namespace shardload
