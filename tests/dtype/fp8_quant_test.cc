// The FP8 post-processing kernels against the scalar conversions, over every code.
#include "shardload/fp8_quant.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "shardload/convert.h"

namespace shardload {
namespace {

TEST(Fp8Quant, RequantizeMatchesTheScalarStepsOnEveryCode) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> scale(1e-4f, 10.0f);
  for (int trial = 0; trial < 50; ++trial) {
    const float from = scale(rng);
    const float to = trial == 0 ? from : scale(rng);
    // Every code, repeated past one kernel block so that block edges are crossed.
    std::vector<uint8_t> codes(10000);
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i % 256);
    requantize_fp8_e4m3(codes, from, to);
    for (size_t i = 0; i < codes.size(); ++i) {
      const uint8_t code = static_cast<uint8_t>(i % 256);
      const float x = fp8e4m3_to_f32(code) * from;
      ASSERT_EQ(codes[i], f32_to_fp8e4m3(x / to)) << "code " << int(code) << " from " << from << " to " << to;
    }
  }
}

TEST(Fp8Quant, RequantizingToTheSameScaleKeepsEveryCode) {
  std::vector<uint8_t> codes(256);
  for (size_t i = 0; i < 256; ++i) codes[i] = static_cast<uint8_t>(i);
  requantize_fp8_e4m3(codes, 0.37f, 0.37f);
  for (size_t i = 0; i < 256; ++i) {
    if ((i & 0x7F) == 0x7F) {
      EXPECT_EQ(codes[i] & 0x7F, 0x7F) << "NaN stays NaN";
    } else {
      EXPECT_EQ(codes[i], i);
    }
  }
}

TEST(Fp8Quant, AbsMaxSkipsNaN) {
  const std::vector<float> values = {0.5f, -3.0f, NAN, 2.0f};
  EXPECT_EQ(abs_max(values), 3.0f);
  EXPECT_EQ(abs_max(std::vector<float>{}), 0.0f);
}

TEST(Fp8Quant, DynamicScaleIsAmaxOver448AndTheMaximumMapsTo448) {
  std::vector<float> values(5000);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (float& v : values) v = normal(rng);
  values[1234] = -0.5f;
  std::vector<uint8_t> codes(values.size());
  const float s = quantize_fp8_e4m3(values, codes);
  EXPECT_EQ(s, 0.5f / 448.0f);
  EXPECT_EQ(fp8e4m3_to_f32(codes[1234]), -448.0f);
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(codes[i], f32_to_fp8e4m3(values[i] / s)) << i;
  std::vector<float> zeros(10, 0.0f);
  EXPECT_EQ(quantize_fp8_e4m3(zeros, std::span<uint8_t>(codes.data(), 10)), 1e-12f / 448.0f);
}

}  // namespace
}  // namespace shardload
