#pragma once

#include <cstdint>
#include <span>

namespace shardload {

// FP8 e4m3fn (re)quantization kernels of ../shared/spec/fp8.md, used by post-processing.

// Requantizes codes stored at scale `from` to scale `to`, in place: x = float(q) * from, then
// q' = fp8(x / to), each step in float32.
void requantize_fp8_e4m3(std::span<uint8_t> codes, float from, float to);

// Largest |v| (NaN ignored).
float abs_max(std::span<const float> values);

// Dynamic quantization: s = max(amax, 1e-12) / 448 and q = fp8(v / s) in float32. Returns s.
float quantize_fp8_e4m3(std::span<const float> values, std::span<uint8_t> codes);

}  // namespace shardload
