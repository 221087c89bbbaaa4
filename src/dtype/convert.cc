#include "shardload/convert.h"

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "dtype/float_type.h"
#include "dtype/kernels.h"
#include "shardload/error.h"

namespace shardload {
namespace {

using dtype_internal::FloatType;

FloatType require_float(DType dtype, const char* field) {
  const std::optional<FloatType> type = dtype_internal::to_float_type(dtype);
  if (!type) {
    throw Error(ErrorKind::kInvalidArgument, "convert works between float dtypes only",
                {.field = field,
                 .expected = "F16, BF16, F32, F64, F8_E4M3 or F8_E5M2",
                 .found = std::string(dtype_name(dtype))});
  }
  return *type;
}

// Integers (compressed-tensors' int64 weight_shape, held by vLLM's MoE in the model dtype) go through
// float32 as torch casts them: exact below 2^24, then rounded to nearest even once more by the float
// conversion. Small tensors only: a plain loop.
template <typename Int>
void integers_to_float(const void* src, DType dst_dtype, void* dst, size_t n) {
  const auto* in = static_cast<const Int*>(src);
  float values[256];
  auto* out = static_cast<std::byte*>(dst);
  const size_t out_size = dtype_bits(dst_dtype) / 8;
  for (size_t done = 0; done < n;) {
    const size_t count = std::min<size_t>(n - done, 256);
    for (size_t i = 0; i < count; ++i) values[i] = static_cast<float>(in[done + i]);
    convert(DType::kF32, values, dst_dtype, out + done * out_size, count);
    done += count;
  }
}

}  // namespace

void convert(DType src_dtype, const void* src, DType dst_dtype, void* dst, size_t n) {
  // Codes of any whole-byte dtype (packed int32 words, int64 shapes) copy as they are.
  if (src_dtype == dst_dtype && dtype_bits(src_dtype) % 8 == 0 && !dtype_internal::to_float_type(src_dtype)) {
    if (n > SIZE_MAX / 8) {
      throw Error(ErrorKind::kInvalidArgument, "element count overflows the address space",
                  {.field = "n", .found = std::to_string(n)});
    }
    if (n != 0) std::memcpy(dst, src, n * (dtype_bits(src_dtype) / 8));
    return;
  }
  if ((src_dtype == DType::kI64 || src_dtype == DType::kI32) && src_dtype != dst_dtype) {
    require_float(dst_dtype, "dst_dtype");
    if (src_dtype == DType::kI64) {
      integers_to_float<int64_t>(src, dst_dtype, dst, n);
    } else {
      integers_to_float<int32_t>(src, dst_dtype, dst, n);
    }
    return;
  }
  const FloatType from = require_float(src_dtype, "src_dtype");
  const FloatType to = require_float(dst_dtype, "dst_dtype");
  // Nothing to do; this also keeps null pointers away from memcpy.
  if (n == 0) return;
  // A corrupt element count must not wrap around into a small byte count.
  if (n > SIZE_MAX / 8) {
    throw Error(ErrorKind::kInvalidArgument, "element count overflows the address space",
                {.field = "n", .found = std::to_string(n)});
  }
  const auto* in = static_cast<const std::byte*>(src);
  auto* out = static_cast<std::byte*>(dst);
  if (from == to) {
    std::memcpy(out, in, n * dtype_internal::float_type_size(from));
    return;
  }
  dtype_internal::convert_with(dtype_internal::best_isa(), from, to, in, out, n);
}

}  // namespace shardload
