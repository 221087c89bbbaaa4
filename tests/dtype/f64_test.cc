// F64 sources round once, straight to the target. Each case is a double just above a tie of the
// target whose float32 rounding is the tie itself: through float32 it would then round to the even
// (lower) neighbour, directly it must round up.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "dtype/scalar.h"
#include "shardload/convert.h"
#include "shardload/dtype.h"

namespace shardload {
namespace {

// 2^-40 is far below half a float32 ulp at these magnitudes, so (float)(tie + 2^-40) == tie.
const double kNudge = std::ldexp(1.0, -40);

TEST(F64Test, Bf16RoundsOnceNotThroughF32) {
  const double tie = 1.0 + std::ldexp(1.0, -8);  // between 0x3F80 (even) and 0x3F81
  const double x = tie + kNudge;
  ASSERT_EQ(static_cast<double>(static_cast<float>(x)), tie);
  EXPECT_EQ(f32_to_bf16(static_cast<float>(x)), 0x3F80);  // what double rounding would give
  EXPECT_EQ(dtype_internal::f64_to_bf16(x), 0x3F81);
  EXPECT_EQ(dtype_internal::f64_to_bf16(tie), 0x3F80);
  EXPECT_EQ(dtype_internal::f64_to_bf16(-x), 0xBF81);
}

TEST(F64Test, F16RoundsOnceNotThroughF32) {
  const double tie = 1.0 + std::ldexp(1.0, -11);  // between 0x3C00 (even) and 0x3C01
  const double x = tie + kNudge;
  ASSERT_EQ(static_cast<double>(static_cast<float>(x)), tie);
  EXPECT_EQ(f32_to_f16(static_cast<float>(x)), 0x3C00);
  EXPECT_EQ(dtype_internal::f64_to_f16(x), 0x3C01);
  // Also in the subnormal range: tie between 0 and 2^-24.
  const double tiny = std::ldexp(1.0, -25) + std::ldexp(1.0, -70);
  ASSERT_EQ(static_cast<double>(static_cast<float>(tiny)), std::ldexp(1.0, -25));
  EXPECT_EQ(f32_to_f16(static_cast<float>(tiny)), 0x0000);
  EXPECT_EQ(dtype_internal::f64_to_f16(tiny), 0x0001);
}

TEST(F64Test, Fp8RoundsOnceNotThroughF32) {
  const double e4m3_tie = 1.0 + std::ldexp(1.0, -4);  // between 0x38 (even) and 0x39
  ASSERT_EQ(static_cast<double>(static_cast<float>(e4m3_tie + kNudge)), e4m3_tie);
  EXPECT_EQ(f32_to_fp8e4m3(static_cast<float>(e4m3_tie + kNudge)), 0x38);
  EXPECT_EQ(dtype_internal::f64_to_fp8e4m3(e4m3_tie + kNudge), 0x39);

  const double e5m2_tie = 1.0 + std::ldexp(1.0, -3);  // between 0x3C (even) and 0x3D
  ASSERT_EQ(static_cast<double>(static_cast<float>(e5m2_tie + kNudge)), e5m2_tie);
  EXPECT_EQ(f32_to_fp8e5m2(static_cast<float>(e5m2_tie + kNudge)), 0x3C);
  EXPECT_EQ(dtype_internal::f64_to_fp8e5m2(e5m2_tie + kNudge), 0x3D);
}

TEST(F64Test, BulkConvertRoundsOnce) {
  const double x = 1.0 + std::ldexp(1.0, -8) + kNudge;
  uint16_t bf16 = 0;
  convert(DType::kF64, &x, DType::kBF16, &bf16, 1);
  EXPECT_EQ(bf16, 0x3F81);
  uint8_t e4m3 = 0;
  const double y = 1.0 + std::ldexp(1.0, -4) + kNudge;
  convert(DType::kF64, &y, DType::kF8E4M3, &e4m3, 1);
  EXPECT_EQ(e4m3, 0x39);
}

TEST(F64Test, OutOfFloatRangeValues) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(dtype_internal::f64_to_bf16(1e300), 0x7F80);
  EXPECT_EQ(dtype_internal::f64_to_bf16(-1e300), 0xFF80);
  EXPECT_EQ(dtype_internal::f64_to_f16(1e300), 0x7C00);
  EXPECT_EQ(dtype_internal::f64_to_fp8e4m3(1e300), 0x7E);
  EXPECT_EQ(dtype_internal::f64_to_fp8e4m3(-kInf), 0xFE);
  EXPECT_EQ(dtype_internal::f64_to_fp8e5m2(1e300), 0x7B);
  EXPECT_EQ(dtype_internal::f64_to_fp8e5m2(kInf), 0x7C);
  EXPECT_EQ(dtype_internal::f64_to_bf16(1e-300), 0x0000);
  EXPECT_EQ(dtype_internal::f64_to_bf16(-1e-300), 0x8000);
  EXPECT_EQ(dtype_internal::f64_to_fp8e4m3(std::numeric_limits<double>::denorm_min()), 0x00);
  // bf16's smallest subnormal, 2^-133, is below float32's normal range but exact in double.
  EXPECT_EQ(dtype_internal::f64_to_bf16(std::ldexp(1.0, -133)), 0x0001);
  EXPECT_EQ(dtype_internal::f64_to_bf16(std::ldexp(1.0, -134)), 0x0000);  // tie, even
  EXPECT_EQ(dtype_internal::f64_to_bf16(std::ldexp(1.0, -134) + std::ldexp(1.0, -180)), 0x0001);
  EXPECT_EQ(dtype_internal::f64_to_bf16(std::ldexp(3.0, -134)), 0x0002);
}

}  // namespace
}  // namespace shardload
