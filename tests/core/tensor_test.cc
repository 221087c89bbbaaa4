#include "shardload/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "shardload/error.h"

namespace shardload {
namespace {

TEST(DTypeTest, NamesRoundTripAndSizesMatchTheFormat) {
  for (DType dtype : kAllDTypes) {
    EXPECT_EQ(parse_dtype(dtype_name(dtype)), dtype) << dtype_name(dtype);
  }
  EXPECT_FALSE(parse_dtype("F12").has_value());
  EXPECT_FALSE(parse_dtype("bf16").has_value());  // the format's spelling is upper case
  EXPECT_EQ(dtype_bits(DType::kBF16), 16u);
  EXPECT_EQ(dtype_bits(DType::kF8E4M3), 8u);
  EXPECT_EQ(dtype_bits(DType::kF4), 4u);
  EXPECT_TRUE(is_loadable(DType::kF8E5M2));
  EXPECT_FALSE(is_loadable(DType::kU16));
  EXPECT_TRUE(is_convertible_float(DType::kF64));
  EXPECT_FALSE(is_convertible_float(DType::kI32));
}

TEST(ShapeTest, CountsElementsAndBytes) {
  EXPECT_EQ(shape_numel({}), 1u);
  EXPECT_EQ(shape_numel({0, 7}), 0u);
  EXPECT_EQ(shape_nbytes({3, 5}, DType::kBF16), 30u);
  EXPECT_EQ(shape_nbytes({6}, DType::kF4), 3u);
}

TEST(ShapeTest, OverflowAndPartialBytesAreErrors) {
  try {
    shape_numel({uint64_t{1} << 40, uint64_t{1} << 40});
    FAIL() << "no overflow reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kShapeOverflow);
    EXPECT_EQ(e.field(), "shape");
  }
  EXPECT_THROW(shape_nbytes({uint64_t{1} << 62}, DType::kF64), Error);
  try {
    shape_nbytes({3}, DType::kF4);
    FAIL() << "3 x 4 bits accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kSizeMismatch);
  }
}

TEST(AlignedBufferTest, IsAlignedZeroedAndMovable) {
  AlignedBuffer buffer(10000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % 4096, 0u);
  for (std::byte b : buffer.span()) ASSERT_EQ(b, std::byte{0});
  std::byte* data = buffer.data();
  AlignedBuffer moved(std::move(buffer));
  EXPECT_EQ(moved.data(), data);
  EXPECT_EQ(moved.size(), 10000u);
  EXPECT_EQ(AlignedBuffer().size(), 0u);
}

}  // namespace
}  // namespace shardload
