#include "dtype/scalar.h"

#include "dtype/codec.h"
#include "dtype/float_format.h"
#include "shardload/convert.h"

namespace shardload {

using dtype_internal::Bf16;
using dtype_internal::decode;
using dtype_internal::encode;
using dtype_internal::F16;
using dtype_internal::F8E4M3;
using dtype_internal::F8E5M2;

float bf16_to_f32(uint16_t bits) { return decode<Bf16>(bits); }
uint16_t f32_to_bf16(float value) { return encode<Bf16>(value); }
float f16_to_f32(uint16_t bits) { return decode<F16>(bits); }
uint16_t f32_to_f16(float value) { return encode<F16>(value); }
float fp8e4m3_to_f32(uint8_t bits) { return decode<F8E4M3>(bits); }
uint8_t f32_to_fp8e4m3(float value) { return encode<F8E4M3>(value); }
float fp8e5m2_to_f32(uint8_t bits) { return decode<F8E5M2>(bits); }
uint8_t f32_to_fp8e5m2(float value) { return encode<F8E5M2>(value); }

namespace dtype_internal {

uint16_t f64_to_bf16(double value) { return encode<Bf16>(value); }
uint16_t f64_to_f16(double value) { return encode<F16>(value); }
uint8_t f64_to_fp8e4m3(double value) { return encode<F8E4M3>(value); }
uint8_t f64_to_fp8e5m2(double value) { return encode<F8E5M2>(value); }

}  // namespace dtype_internal
}  // namespace shardload
