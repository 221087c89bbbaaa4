#pragma once

#include <cstdint>
#include <span>

namespace shardload {

// FP8 e4m3fn (re)quantization kernels of docs/fp8.md, used by post-processing.

// The largest finite e4m3fn value: a scale maps a tensor's amax to it.
inline constexpr float kFp8E4m3Max = 448.0f;
// The amax a scale is computed from is at least this, so that an all-zero tensor or block gets a
// positive scale rather than 0/0.
inline constexpr float kFp8AmaxFloor = 1e-12f;

// Requantizes codes stored at scale `from` to scale `to`, in place: x = float(q) * from, then
// q' = fp8(x / to), each step in float32.
void requantize_fp8_e4m3(std::span<uint8_t> codes, float from, float to);

// Largest |v| (NaN ignored).
float abs_max(std::span<const float> values);

// Dynamic quantization: s = max(amax, kFp8AmaxFloor) / kFp8E4m3Max and q = fp8(v / s) in float32.
// Returns s.
float quantize_fp8_e4m3(std::span<const float> values, std::span<uint8_t> codes);

}  // namespace shardload
