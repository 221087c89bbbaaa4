#include "shardload/convert.h"

#include <cstdint>
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

}  // namespace

void convert(DType src_dtype, const void* src, DType dst_dtype, void* dst, size_t n) {
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
