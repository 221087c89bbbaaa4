#pragma once

#include <cstddef>
#include <cstdint>

#include "shardload/dtype.h"

namespace shardload {

// Scalar conversions. Narrowing rounds to nearest, ties to even. FP8 e4m3fn saturates to +-448 (NaN stays NaN);
// e5m2 saturates finite values to +-57344 and keeps infinities and NaN (docs/fp8.md).
float bf16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float value);
float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);
float fp8e4m3_to_f32(uint8_t bits);
uint8_t f32_to_fp8e4m3(float value);
float fp8e5m2_to_f32(uint8_t bits);
uint8_t f32_to_fp8e5m2(float value);

// Bulk conversion of n elements between any two convertible float dtypes (is_convertible_float), or a copy when
// src == dst; I32 and I64 also convert to a float dtype (through float32, as torch casts them). The dtype pair is dispatched once per call; the inner loops are vectorizable, with AVX2/AVX-512
// variants picked at run time. src and dst must not overlap. Throws Error(kInvalidArgument) for other dtypes.
void convert(DType src_dtype, const void* src, DType dst_dtype, void* dst, size_t n);

}  // namespace shardload
