#pragma once

#include <cstdint>

// Narrowing straight from double, for F64 sources: rounding through float first could round twice
// (a double just above a tie would land on the tie, then go to even).

namespace shardload::dtype_internal {

uint16_t f64_to_bf16(double value);
uint16_t f64_to_f16(double value);
uint8_t f64_to_fp8e4m3(double value);
uint8_t f64_to_fp8e5m2(double value);

}  // namespace shardload::dtype_internal
