#include "dtype/float_type.h"

namespace shardload::dtype_internal {

std::optional<FloatType> to_float_type(DType dtype) {
  switch (dtype) {
    case DType::kF16: return FloatType::kF16;
    case DType::kBF16: return FloatType::kBF16;
    case DType::kF32: return FloatType::kF32;
    case DType::kF64: return FloatType::kF64;
    case DType::kF8E4M3: return FloatType::kF8E4M3;
    case DType::kF8E5M2: return FloatType::kF8E5M2;
    case DType::kBool:
    case DType::kU8:
    case DType::kI8:
    case DType::kI16:
    case DType::kU16:
    case DType::kI32:
    case DType::kU32:
    case DType::kI64:
    case DType::kU64:
    case DType::kF8E8M0:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2FNUZ:
    case DType::kF6E2M3:
    case DType::kF6E3M2:
    case DType::kF4:
    case DType::kC64: return std::nullopt;
  }
  return std::nullopt;
}

size_t float_type_size(FloatType type) {
  switch (type) {
    case FloatType::kF16: return 2;
    case FloatType::kBF16: return 2;
    case FloatType::kF32: return 4;
    case FloatType::kF64: return 8;
    case FloatType::kF8E4M3: return 1;
    case FloatType::kF8E5M2: return 1;
  }
  return 0;
}

}  // namespace shardload::dtype_internal
