// Hand-checked bf16 and f16 values: ties to even, overflow to infinity, subnormals and NaN. The
// exhaustive sweeps over all 65536 codes are in narrow_format_test.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "shardload/convert.h"

namespace shardload {
namespace {

constexpr float kF32Inf = std::numeric_limits<float>::infinity();

float from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(Bf16Test, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F808000)), 0x3F80);  // tie, 0x3F80 even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F818000)), 0x3F82);  // tie, 0x3F81 odd: up
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F808001)), 0x3F81);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F807FFF)), 0x3F80);
  EXPECT_EQ(f32_to_bf16(from_bits(0xBF818000)), 0xBF82);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  // Float32 subnormals keep their place: bf16 has the same exponent range.
  EXPECT_EQ(f32_to_bf16(from_bits(0x00018000)), 0x0002);
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008000)), 0x0000);
  EXPECT_EQ(f32_to_bf16(from_bits(0x007FFFFF)), 0x0080);  // rounds up into the normals
}

TEST(Bf16Test, OverflowsToInfinity) {
  EXPECT_EQ(f32_to_bf16(from_bits(0x7F7F7FFF)), 0x7F7F);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7F7F8000)), 0x7F80);  // tie with an odd max: to infinity
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(f32_to_bf16(kF32Inf), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-kF32Inf), 0xFF80);
  EXPECT_EQ(bf16_to_f32(0x7F80), kF32Inf);
}

TEST(Bf16Test, NanStaysQuietNan) {
  EXPECT_EQ(f32_to_bf16(from_bits(0x7FC00000)), 0x7FC0);
  EXPECT_EQ(f32_to_bf16(from_bits(0xFFC00000)), 0xFFC0);
  // A payload only in the low bits must not round or truncate into infinity.
  const uint16_t low_payload = f32_to_bf16(from_bits(0x7F800001));
  EXPECT_TRUE(std::isnan(bf16_to_f32(low_payload)));
  EXPECT_EQ(f32_to_bf16(from_bits(0x7FFFFFFF)), 0x7FFF);  // not rounded up into the sign
}

TEST(F16Test, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie, even
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(3.0f, -11)), 0x3C02);  // tie, odd: up
  EXPECT_EQ(f32_to_f16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3C01);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(0.1f), 0x2E66);
  // Subnormals: smallest is 2^-24.
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie, even
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.5f, -24)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x03FF), std::ldexp(1023.0f, -24));
}

TEST(F16Test, OverflowsToInfinity) {
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // tie with an odd max: to infinity
  EXPECT_EQ(f32_to_f16(1e10f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xFC00);
  EXPECT_EQ(f32_to_f16(kF32Inf), 0x7C00);
  EXPECT_EQ(f32_to_f16(-kF32Inf), 0xFC00);
  EXPECT_EQ(f16_to_f32(0x7C00), kF32Inf);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
}

TEST(F16Test, NanStaysNan) {
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::quiet_NaN()), 0x7E00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::quiet_NaN()), 0xFE00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(from_bits(0x7F800001)))));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7C01)));  // signalling f16 NaN
  EXPECT_TRUE(std::isnan(f16_to_f32(0xFE00)));
  EXPECT_TRUE(std::signbit(f16_to_f32(0xFE00)));
}

}  // namespace
}  // namespace shardload
