#include "shardload/fp8_quant.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "shardload/convert.h"

namespace shardload {
namespace {

// Values converted per step: a cache-sized block for the vectorized bulk kernels.
constexpr size_t kBlock = 4096;

}  // namespace

void requantize_fp8_e4m3(std::span<uint8_t> codes, float from, float to) {
  // Through the vectorized bulk kernels, a block at a time (faster than a byte table here).
  std::array<float, kBlock> x;
  for (size_t at = 0; at < codes.size(); at += kBlock) {
    const size_t n = std::min(kBlock, codes.size() - at);
    convert(DType::kF8E4M3, codes.data() + at, DType::kF32, x.data(), n);
    for (size_t i = 0; i < n; ++i) x[i] = x[i] * from / to;
    convert(DType::kF32, x.data(), DType::kF8E4M3, codes.data() + at, n);
  }
}

float abs_max(std::span<const float> values) {
  // Written as a compare-select so that it vectorizes (maxps); a NaN compares false and is skipped.
  float amax = 0;
  for (float v : values) {
    const float a = std::fabs(v);
    amax = a > amax ? a : amax;
  }
  return amax;
}

float quantize_fp8_e4m3(std::span<const float> values, std::span<uint8_t> codes) {
  const float s = std::max(abs_max(values), kFp8AmaxFloor) / kFp8E4m3Max;
  // Divided into a block, then converted by the vectorized bulk kernel.
  std::array<float, kBlock> scaled;
  for (size_t at = 0; at < values.size(); at += kBlock) {
    const size_t n = std::min(kBlock, values.size() - at);
    for (size_t i = 0; i < n; ++i) scaled[i] = values[at + i] / s;
    convert(DType::kF32, scaled.data(), DType::kF8E4M3, codes.data() + at, n);
  }
  return s;
}

}  // namespace shardload
