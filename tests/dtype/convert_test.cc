// Bulk convert() against the scalar functions, element by element and bit for bit, for every pair
// of the six float dtypes, at lengths that exercise vector tails and at unaligned addresses.

#include "shardload/convert.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dtype/float_type.h"
#include "dtype/kernels.h"
#include "dtype/scalar.h"
#include "shardload/dtype.h"
#include "shardload/error.h"

namespace shardload {
namespace {

constexpr DType kFloatDTypes[] = {DType::kF16, DType::kBF16,   DType::kF32,
                                  DType::kF64, DType::kF8E4M3, DType::kF8E5M2};

size_t element_size(DType dtype) { return dtype_bits(dtype) / 8; }

// A source element of any dtype but F64, as float via the scalar decoders (exact, NaN bits
// included: a round trip through double would quiet signalling NaNs).
float load_as_float(DType dtype, const std::byte* p) {
  uint8_t u8 = 0;
  uint16_t u16 = 0;
  float f32 = 0;
  if (dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2) {
    std::memcpy(&u8, p, 1);
    return dtype == DType::kF8E4M3 ? fp8e4m3_to_f32(u8) : fp8e5m2_to_f32(u8);
  }
  if (dtype == DType::kF16 || dtype == DType::kBF16) {
    std::memcpy(&u16, p, 2);
    return dtype == DType::kF16 ? f16_to_f32(u16) : bf16_to_f32(u16);
  }
  EXPECT_EQ(dtype, DType::kF32);
  std::memcpy(&f32, p, 4);
  return f32;
}

// What convert() must produce for one element: the scalar function of the pair. F64 sources use the
// direct f64 functions; every other source is exact in float and goes through the f32 ones.
void scalar_convert(DType from, const std::byte* src, DType to, std::byte* dst) {
  if (from == to) {
    std::memcpy(dst, src, element_size(from));
    return;
  }
  const bool wide = from == DType::kF64;
  double d = 0;
  float f = 0;
  if (wide) {
    std::memcpy(&d, src, 8);
    f = static_cast<float>(d);
  } else {
    f = load_as_float(from, src);
    d = f;
  }
  uint16_t u16 = 0;
  uint8_t u8 = 0;
  if (to == DType::kF32) {
    std::memcpy(dst, &f, 4);
  } else if (to == DType::kF64) {
    std::memcpy(dst, &d, 8);
  } else if (to == DType::kF16) {
    u16 = wide ? dtype_internal::f64_to_f16(d) : f32_to_f16(f);
    std::memcpy(dst, &u16, 2);
  } else if (to == DType::kBF16) {
    u16 = wide ? dtype_internal::f64_to_bf16(d) : f32_to_bf16(f);
    std::memcpy(dst, &u16, 2);
  } else if (to == DType::kF8E4M3) {
    u8 = wide ? dtype_internal::f64_to_fp8e4m3(d) : f32_to_fp8e4m3(f);
    std::memcpy(dst, &u8, 1);
  } else {
    ASSERT_EQ(to, DType::kF8E5M2);
    u8 = wide ? dtype_internal::f64_to_fp8e5m2(d) : f32_to_fp8e5m2(f);
    std::memcpy(dst, &u8, 1);
  }
}

// Source elements: random bit patterns (every code of the narrow types, NaNs and infinities of the
// wide ones) mixed with values in the narrow types' ranges, which random float bits rarely hit.
std::vector<std::byte> make_source(DType dtype, size_t n, std::mt19937_64& rng) {
  const size_t size = element_size(dtype);
  std::vector<std::byte> out(n * size);
  std::uniform_int_distribution<int> exponent(-140, 20);
  std::uniform_real_distribution<double> mantissa(-2.0, 2.0);
  const double specials[] = {0.0,
                             -0.0,
                             std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN(),
                             448.0,
                             464.0,
                             57344.0,
                             61440.0,
                             65520.0,
                             1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)};
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = rng();
    std::byte* p = out.data() + i * size;
    if (size <= 2 || i % 3 == 0) {
      std::memcpy(p, &bits, size);  // little-endian: the low bytes
      continue;
    }
    const double d = i % 7 == 1 ? specials[(i / 7) % std::size(specials)]
                                : std::ldexp(mantissa(rng), exponent(rng));
    if (size == 4) {
      const auto f = static_cast<float>(d);
      std::memcpy(p, &f, 4);
    } else {
      std::memcpy(p, &d, 8);
    }
  }
  return out;
}

struct PairCase {
  DType from;
  DType to;
};

std::vector<PairCase> all_pairs() {
  std::vector<PairCase> pairs;
  for (DType from : kFloatDTypes) {
    for (DType to : kFloatDTypes) pairs.push_back({from, to});
  }
  return pairs;
}

class ConvertPairTest : public ::testing::TestWithParam<PairCase> {};

// Compared byte for byte, guards included: no write outside the destination.
void expect_same_bytes(const std::vector<std::byte>& got, const std::vector<std::byte>& want,
                       size_t dst_offset, size_t out_size) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      const size_t element = (i - dst_offset) / out_size;
      ADD_FAILURE() << "first difference at byte " << i << " (element " << element << "): got "
                    << static_cast<int>(got[i]) << ", want " << static_cast<int>(want[i]);
      return;
    }
  }
}

TEST_P(ConvertPairTest, BulkEqualsScalarAtEveryLengthAndAlignment) {
  const auto [from, to] = GetParam();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(fmt::format("seed {}", seed));
  std::mt19937_64 rng(seed);
  const size_t in_size = element_size(from);
  const size_t out_size = element_size(to);
  constexpr size_t kGuard = 16;
  constexpr auto kFill = std::byte{0xA5};

  for (const size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{33}, size_t{1003}, size_t{4099}}) {
    for (const size_t src_offset : {size_t{0}, size_t{1}, size_t{3}}) {
      for (const size_t dst_offset : {size_t{0}, size_t{1}, size_t{6}}) {
        SCOPED_TRACE(fmt::format("n {} src_offset {} dst_offset {}", n, src_offset, dst_offset));
        const std::vector<std::byte> values = make_source(from, n, rng);
        std::vector<std::byte> src(src_offset + values.size() + kGuard);
        if (!values.empty()) std::memcpy(src.data() + src_offset, values.data(), values.size());

        std::vector<std::byte> want(dst_offset + n * out_size + kGuard, kFill);
        for (size_t i = 0; i < n; ++i) {
          scalar_convert(from, values.data() + i * in_size, to,
                         want.data() + dst_offset + i * out_size);
        }
        // convert() itself, then the loops of every instruction set this CPU has, whichever
        // convert() picks.
        std::vector<std::byte> got(want.size(), kFill);
        convert(from, src.data() + src_offset, to, got.data() + dst_offset, n);
        expect_same_bytes(got, want, dst_offset, out_size);
        if (from == to) continue;  // a plain copy, no loops
        for (const dtype_internal::Isa isa : dtype_internal::kAllIsas) {
          if (!dtype_internal::cpu_supports(isa)) continue;
          SCOPED_TRACE(fmt::format("instruction set {}", static_cast<int>(isa)));
          std::fill(got.begin(), got.end(), kFill);
          dtype_internal::convert_with(isa, *dtype_internal::to_float_type(from),
                                       *dtype_internal::to_float_type(to), src.data() + src_offset,
                                       got.data() + dst_offset, n);
          expect_same_bytes(got, want, dst_offset, out_size);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFloatPairs, ConvertPairTest, ::testing::ValuesIn(all_pairs()),
                         [](const ::testing::TestParamInfo<PairCase>& info) {
                           std::string name = fmt::format("{}_to_{}", dtype_name(info.param.from),
                                                          dtype_name(info.param.to));
                           return name;
                         });

TEST(ConvertTest, TellsWhichInstructionSetsWereTested) {
  for (const dtype_internal::Isa isa : dtype_internal::kAllIsas) {
    std::printf("instruction set %d: %s\n", static_cast<int>(isa),
                dtype_internal::cpu_supports(isa) ? "tested" : "not supported by this CPU");
  }
  EXPECT_TRUE(dtype_internal::cpu_supports(dtype_internal::Isa::kBaseline));
  EXPECT_TRUE(dtype_internal::cpu_supports(dtype_internal::best_isa()));
}

TEST(ConvertTest, EveryFp8CodeWidensExactly) {
  std::vector<uint8_t> codes(256);
  for (int i = 0; i < 256; ++i) codes[i] = static_cast<uint8_t>(i);
  std::vector<uint16_t> bf16(256);
  std::vector<float> f32(256);
  convert(DType::kF8E4M3, codes.data(), DType::kBF16, bf16.data(), 256);
  convert(DType::kF8E4M3, codes.data(), DType::kF32, f32.data(), 256);
  for (int i = 0; i < 256; ++i) {
    SCOPED_TRACE(i);
    if (i == 0x7F || i == 0xFF) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(bf16[i])));
      EXPECT_TRUE(std::isnan(f32[i]));
    } else {
      EXPECT_EQ(bf16_to_f32(bf16[i]), f32[i]);
      EXPECT_EQ(f32[i], fp8e4m3_to_f32(static_cast<uint8_t>(i)));
    }
  }
}

// vLLM's MoE keeps compressed-tensors' int64 weight_shape in the model dtype: torch's cast, through float32
// then rounded to nearest even (257 is between two BF16 values: 256). Integer codes copy as they are.
TEST(ConvertTest, IntegersConvertThroughFloat32) {
  const int64_t shapes[] = {7168, 2880, 257, -3};
  uint16_t bf16[4];
  convert(DType::kI64, shapes, DType::kBF16, bf16, 4);
  EXPECT_EQ(bf16_to_f32(bf16[0]), 7168.0f);
  EXPECT_EQ(bf16_to_f32(bf16[1]), 2880.0f);
  EXPECT_EQ(bf16_to_f32(bf16[2]), 256.0f);
  EXPECT_EQ(bf16_to_f32(bf16[3]), -3.0f);
  const int32_t words[] = {-1, 0x12345678};
  float f32[2];
  convert(DType::kI32, words, DType::kF32, f32, 2);
  EXPECT_EQ(f32[0], -1.0f);
  int32_t copied[2] = {};
  convert(DType::kI32, words, DType::kI32, copied, 2);
  EXPECT_EQ(copied[1], 0x12345678);
  EXPECT_THROW(convert(DType::kF32, f32, DType::kI32, copied, 2), Error);  // no float to integer
}

TEST(ConvertTest, NonFloatDTypesThrowInvalidArgument) {
  std::vector<std::byte> src(64), dst(64);
  int checked = 0;
  for (DType dtype : kAllDTypes) {
    // Integer sources (a packed format's int64 weight_shape) convert to floats: IntegersConvertThroughFloat32.
    if (is_convertible_float(dtype) || dtype == DType::kI32 || dtype == DType::kI64) continue;
    ++checked;
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    for (const size_t n : {size_t{0}, size_t{4}}) {
      try {
        convert(dtype, src.data(), DType::kF32, dst.data(), n);
        ADD_FAILURE() << "no error for source dtype";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
        EXPECT_EQ(e.field(), "src_dtype");
        EXPECT_EQ(e.found(), dtype_name(dtype));
      }
      try {
        convert(DType::kBF16, src.data(), dtype, dst.data(), n);
        ADD_FAILURE() << "no error for destination dtype";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
        EXPECT_EQ(e.field(), "dst_dtype");
      }
    }
  }
  EXPECT_GE(checked, 10);
}

TEST(ConvertTest, ZeroElementsTouchNothing) {
  convert(DType::kF32, nullptr, DType::kBF16, nullptr, 0);
  convert(DType::kF16, nullptr, DType::kF16, nullptr, 0);
}

TEST(ConvertTest, HugeCountIsRejected) {
  std::byte b{};
  try {
    convert(DType::kF32, &b, DType::kF64, &b, std::numeric_limits<size_t>::max());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  }
}

}  // namespace
}  // namespace shardload
