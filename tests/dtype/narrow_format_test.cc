// Exhaustive checks of the scalar conversions of every narrow format (bf16, f16, fp8 e4m3fn and
// e5m2) against the independent float64 model in float_reference.h.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dtype/scalar.h"
#include "float_reference.h"
#include "shardload/convert.h"

namespace shardload {
namespace {

using testing::RefFormat;

constexpr float kFloatInf = std::numeric_limits<float>::infinity();

struct NarrowCase {
  const RefFormat* format;
  float (*to_f32)(uint32_t);
  uint32_t (*from_f32)(float);
  uint32_t (*from_f64)(double);
};

const NarrowCase kCases[] = {
    {&testing::kRefBf16, [](uint32_t c) { return bf16_to_f32(static_cast<uint16_t>(c)); },
     [](float v) -> uint32_t { return f32_to_bf16(v); },
     [](double v) -> uint32_t { return dtype_internal::f64_to_bf16(v); }},
    {&testing::kRefF16, [](uint32_t c) { return f16_to_f32(static_cast<uint16_t>(c)); },
     [](float v) -> uint32_t { return f32_to_f16(v); },
     [](double v) -> uint32_t { return dtype_internal::f64_to_f16(v); }},
    {&testing::kRefE4M3, [](uint32_t c) { return fp8e4m3_to_f32(static_cast<uint8_t>(c)); },
     [](float v) -> uint32_t { return f32_to_fp8e4m3(v); },
     [](double v) -> uint32_t { return dtype_internal::f64_to_fp8e4m3(v); }},
    {&testing::kRefE5M2, [](uint32_t c) { return fp8e5m2_to_f32(static_cast<uint8_t>(c)); },
     [](float v) -> uint32_t { return f32_to_fp8e5m2(v); },
     [](double v) -> uint32_t { return dtype_internal::f64_to_fp8e5m2(v); }},
};

class NarrowFormatTest : public ::testing::TestWithParam<NarrowCase> {
 protected:
  const RefFormat& format() const { return *GetParam().format; }
  uint32_t sign_bit() const { return testing::ref_sign_bit(format()); }
  bool is_nan_code(uint32_t code) const { return testing::ref_is_nan(format(), code); }
};

std::string hex(uint64_t v) { return fmt::format("{:#x}", v); }

TEST_P(NarrowFormatTest, EveryCodeDecodesToTheReferenceValue) {
  for (uint32_t code = 0; code < testing::ref_code_count(format()); ++code) {
    const float got = GetParam().to_f32(code);
    const double want = testing::ref_decode(format(), code);
    SCOPED_TRACE(format().name + " code " + hex(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << got;
    } else {
      EXPECT_EQ(static_cast<double>(got), want);
      EXPECT_EQ(std::signbit(got), std::signbit(want));  // -0 stays -0
    }
  }
}

TEST_P(NarrowFormatTest, EveryCodeRoundTripsThroughF32AndF64) {
  for (uint32_t code = 0; code < testing::ref_code_count(format()); ++code) {
    const float value = GetParam().to_f32(code);
    SCOPED_TRACE(format().name + " code " + hex(code));
    if (is_nan_code(code)) {
      EXPECT_TRUE(is_nan_code(GetParam().from_f32(value)));
      EXPECT_TRUE(is_nan_code(GetParam().from_f64(value)));
      // The sign of a NaN survives too.
      EXPECT_EQ(GetParam().from_f32(value) & sign_bit(), code & sign_bit());
    } else {
      EXPECT_EQ(GetParam().from_f32(value), code);
      EXPECT_EQ(GetParam().from_f64(value), code);
    }
  }
}

// For every pair of neighbours lo < hi among the finite non-negative values: lo itself, the
// midpoint (ties to the even code), and the floats just either side of the midpoint; each with both
// signs. Midpoints of these formats are exact in float32.
TEST_P(NarrowFormatTest, F32OnEveryValueAndMidpointRoundsToNearestEven) {
  const uint32_t max_code = testing::ref_max_finite_code(format());
  for (uint32_t lo = 0; lo < max_code; ++lo) {
    const uint32_t hi = lo + 1;
    const float lo_value = static_cast<float>(testing::ref_decode(format(), lo));
    const float hi_value = static_cast<float>(testing::ref_decode(format(), hi));
    const float mid = lo_value + (hi_value - lo_value) / 2;
    ASSERT_EQ(static_cast<double>(mid),
              (testing::ref_decode(format(), lo) + testing::ref_decode(format(), hi)) / 2);
    const uint32_t even = lo % 2 == 0 ? lo : hi;
    SCOPED_TRACE(format().name + " between " + hex(lo) + " and " + hex(hi));
    for (const uint32_t sign : {0u, sign_bit()}) {
      const float s = sign != 0 ? -1.0f : 1.0f;
      EXPECT_EQ(GetParam().from_f32(s * lo_value), sign | lo);
      EXPECT_EQ(GetParam().from_f32(s * mid), sign | even);
      EXPECT_EQ(GetParam().from_f32(s * std::nextafter(mid, 0.0f)), sign | lo);
      EXPECT_EQ(GetParam().from_f32(s * std::nextafter(mid, kFloatInf)), sign | hi);
      // The model agrees on all of them.
      EXPECT_EQ(testing::ref_encode(format(), s * mid), sign | even);
      EXPECT_EQ(testing::ref_encode(format(), s * std::nextafter(mid, kFloatInf)), sign | hi);
    }
  }
}

TEST_P(NarrowFormatTest, F64JustAroundEveryMidpointRoundsDirectly) {
  const uint32_t max_code = testing::ref_max_finite_code(format());
  for (uint32_t lo = 0; lo < max_code; ++lo) {
    const double lo_value = testing::ref_decode(format(), lo);
    const double mid = (lo_value + testing::ref_decode(format(), lo + 1)) / 2;
    SCOPED_TRACE(format().name + " above " + hex(lo));
    EXPECT_EQ(GetParam().from_f64(mid), lo % 2 == 0 ? lo : lo + 1);
    // Through float32 these two would land on the tie itself and then go to even.
    EXPECT_EQ(GetParam().from_f64(std::nextafter(mid, 1e300)), lo + 1);
    EXPECT_EQ(GetParam().from_f64(-std::nextafter(mid, 0.0)), sign_bit() | lo);
  }
}

// Random inputs, concentrated on the format's range but covering every float: the printed seed
// replays a failure.
TEST_P(NarrowFormatTest, RandomF32AndF64MatchTheReference) {
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int min_exponent = 1 - format().bias - format().mantissa_bits - 3;
  const int max_exponent =
      2 - format().bias + static_cast<int>(testing::ref_exponent_max(format())) + 2;
  std::uniform_int_distribution<int> exponent(min_exponent, max_exponent);
  std::uniform_real_distribution<double> mantissa(-2.0, 2.0);
  int mismatches = 0;
  for (int i = 0; i < 200000 && mismatches < 10; ++i) {
    const uint64_t bits = rng();
    const double d =
        i % 2 == 0 ? std::ldexp(mantissa(rng), exponent(rng)) : std::bit_cast<double>(bits);
    const float f =
        i % 4 == 1 ? std::bit_cast<float>(static_cast<uint32_t>(bits)) : static_cast<float>(d);
    if (!std::isnan(f) && GetParam().from_f32(f) != testing::ref_encode(format(), f)) {
      ++mismatches;
      ADD_FAILURE() << "f32 " << hex(std::bit_cast<uint32_t>(f)) << " -> "
                    << hex(GetParam().from_f32(f)) << ", reference "
                    << hex(testing::ref_encode(format(), f));
    }
    if (!std::isnan(d) && GetParam().from_f64(d) != testing::ref_encode(format(), d)) {
      ++mismatches;
      ADD_FAILURE() << "f64 " << hex(std::bit_cast<uint64_t>(d)) << " -> "
                    << hex(GetParam().from_f64(d)) << ", reference "
                    << hex(testing::ref_encode(format(), d));
    }
  }
}

TEST_P(NarrowFormatTest, NanStaysNanWithItsSign) {
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::signaling_NaN(),
                        std::bit_cast<float>(0x7F800001u), std::bit_cast<float>(0x7FFFFFFFu)};
  for (const float nan : nans) {
    for (const float s : {1.0f, -1.0f}) {
      const float x = std::copysign(nan, s);
      const uint32_t code = GetParam().from_f32(x);
      EXPECT_TRUE(is_nan_code(code)) << hex(code);
      EXPECT_EQ((code & sign_bit()) != 0, s < 0);
      const uint32_t code64 = GetParam().from_f64(static_cast<double>(x));
      EXPECT_TRUE(is_nan_code(code64)) << hex(code64);
      EXPECT_EQ((code64 & sign_bit()) != 0, s < 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllNarrowFormats, NarrowFormatTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<NarrowCase>& info) {
                           std::string name = info.param.format->name;
                           return name;
                         });

}  // namespace
}  // namespace shardload
