// Hand-checked FP8 values from the format definitions (docs/fp8.md): known codes,
// saturation, infinities, NaN, signed zero and the subnormal ties. The exhaustive sweeps are in
// narrow_format_test.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "shardload/convert.h"

namespace shardload {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kFloatMax = std::numeric_limits<float>::max();

TEST(Fp8E4M3Test, DecodesKnownCodes) {
  EXPECT_EQ(fp8e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(fp8e4m3_to_f32(0x80)));
  EXPECT_EQ(fp8e4m3_to_f32(0x80), 0.0f);
  EXPECT_EQ(fp8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8e4m3_to_f32(0x07), std::ldexp(7.0f, -9));  // largest subnormal
  EXPECT_EQ(fp8e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(fp8e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8e4m3_to_f32(0x39), 1.125f);
  EXPECT_EQ(fp8e4m3_to_f32(0xC0), -2.0f);
  EXPECT_EQ(fp8e4m3_to_f32(0x78), 256.0f);  // all-ones exponent is finite in e4m3fn
  EXPECT_EQ(fp8e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(fp8e4m3_to_f32(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(fp8e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(fp8e4m3_to_f32(0xFF)));
}

TEST(Fp8E4M3Test, SaturatesToMaxFiniteIncludingInfinity) {
  EXPECT_EQ(f32_to_fp8e4m3(448.0f), 0x7E);
  EXPECT_EQ(f32_to_fp8e4m3(449.0f), 0x7E);
  EXPECT_EQ(f32_to_fp8e4m3(464.0f), 0x7E);  // would be a tie with 480, which does not exist
  EXPECT_EQ(f32_to_fp8e4m3(480.0f), 0x7E);
  EXPECT_EQ(f32_to_fp8e4m3(1e6f), 0x7E);
  EXPECT_EQ(f32_to_fp8e4m3(kFloatMax), 0x7E);
  EXPECT_EQ(f32_to_fp8e4m3(kInf), 0x7E);
  EXPECT_EQ(f32_to_fp8e4m3(-449.0f), 0xFE);
  EXPECT_EQ(f32_to_fp8e4m3(-kInf), 0xFE);
}

TEST(Fp8E4M3Test, NanZeroAndTies) {
  EXPECT_EQ(f32_to_fp8e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(f32_to_fp8e4m3(-std::numeric_limits<float>::quiet_NaN()), 0xFF);
  EXPECT_EQ(f32_to_fp8e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_fp8e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_fp8e4m3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: to 0
  EXPECT_EQ(f32_to_fp8e4m3(std::ldexp(1.0f, -10) * 1.0001f), 0x01);
  EXPECT_EQ(f32_to_fp8e4m3(std::ldexp(3.0f, -10)), 0x02);   // 1.5 units: to the even 2
  EXPECT_EQ(f32_to_fp8e4m3(std::ldexp(15.0f, -10)), 0x08);  // rounds up into the normals
  EXPECT_EQ(f32_to_fp8e4m3(1.0625f), 0x38);                 // tie between 0x38 and 0x39
  EXPECT_EQ(f32_to_fp8e4m3(1.1875f), 0x3A);                 // tie between 0x39 and 0x3A
  EXPECT_EQ(f32_to_fp8e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(f32_to_fp8e4m3(-std::numeric_limits<float>::denorm_min()), 0x80);
}

TEST(Fp8E5M2Test, DecodesKnownCodes) {
  EXPECT_EQ(fp8e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8e5m2_to_f32(0x04), std::ldexp(1.0f, -14));
  EXPECT_EQ(fp8e5m2_to_f32(0x3C), 1.0f);
  EXPECT_EQ(fp8e5m2_to_f32(0x3D), 1.25f);
  EXPECT_EQ(fp8e5m2_to_f32(0x7B), 57344.0f);
  EXPECT_EQ(fp8e5m2_to_f32(0x7C), kInf);
  EXPECT_EQ(fp8e5m2_to_f32(0xFC), -kInf);
  EXPECT_TRUE(std::isnan(fp8e5m2_to_f32(0x7D)));
  EXPECT_TRUE(std::isnan(fp8e5m2_to_f32(0x7E)));
  EXPECT_TRUE(std::isnan(fp8e5m2_to_f32(0xFF)));
  EXPECT_TRUE(std::signbit(fp8e5m2_to_f32(0x80)));
}

TEST(Fp8E5M2Test, SaturatesFiniteKeepsInfinityAndNan) {
  EXPECT_EQ(f32_to_fp8e5m2(57344.0f), 0x7B);
  EXPECT_EQ(f32_to_fp8e5m2(61440.0f), 0x7B);  // IEEE would round this tie to infinity
  EXPECT_EQ(f32_to_fp8e5m2(1e9f), 0x7B);
  EXPECT_EQ(f32_to_fp8e5m2(kFloatMax), 0x7B);
  EXPECT_EQ(f32_to_fp8e5m2(-kFloatMax), 0xFB);
  EXPECT_EQ(f32_to_fp8e5m2(kInf), 0x7C);
  EXPECT_EQ(f32_to_fp8e5m2(-kInf), 0xFC);
  const uint8_t nan = f32_to_fp8e5m2(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C, 0x7C);
  EXPECT_NE(nan & 0x03, 0);
  EXPECT_EQ(f32_to_fp8e5m2(-0.0f), 0x80);
  EXPECT_EQ(f32_to_fp8e5m2(std::ldexp(1.0f, -17)), 0x00);  // tie: to the even 0
  EXPECT_EQ(f32_to_fp8e5m2(std::ldexp(3.0f, -17)), 0x02);
  EXPECT_EQ(f32_to_fp8e5m2(1.125f), 0x3C);  // tie between 0x3C and 0x3D
  EXPECT_EQ(f32_to_fp8e5m2(1.375f), 0x3E);  // tie between 0x3D and 0x3E
}

}  // namespace
}  // namespace shardload
