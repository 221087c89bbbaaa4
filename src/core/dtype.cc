#include "shardload/dtype.h"


namespace shardload {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBool: return "BOOL";
    case DType::kU8: return "U8";
    case DType::kI8: return "I8";
    case DType::kI16: return "I16";
    case DType::kU16: return "U16";
    case DType::kI32: return "I32";
    case DType::kU32: return "U32";
    case DType::kI64: return "I64";
    case DType::kU64: return "U64";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF32: return "F32";
    case DType::kF64: return "F64";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kF8E5M2: return "F8_E5M2";
    case DType::kF8E8M0: return "F8_E8M0";
    case DType::kF8E4M3FNUZ: return "F8_E4M3FNUZ";
    case DType::kF8E5M2FNUZ: return "F8_E5M2FNUZ";
    case DType::kF6E2M3: return "F6_E2M3";
    case DType::kF6E3M2: return "F6_E3M2";
    case DType::kF4: return "F4";
    case DType::kC64: return "C64";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType dtype : kAllDTypes) {
    if (dtype_name(dtype) == name) return dtype;
  }
  return std::nullopt;
}

size_t dtype_bits(DType dtype) {
  switch (dtype) {
    case DType::kBool: return 8;
    case DType::kU8: return 8;
    case DType::kI8: return 8;
    case DType::kI16: return 16;
    case DType::kU16: return 16;
    case DType::kI32: return 32;
    case DType::kU32: return 32;
    case DType::kI64: return 64;
    case DType::kU64: return 64;
    case DType::kF16: return 16;
    case DType::kBF16: return 16;
    case DType::kF32: return 32;
    case DType::kF64: return 64;
    case DType::kF8E4M3: return 8;
    case DType::kF8E5M2: return 8;
    case DType::kF8E8M0: return 8;
    case DType::kF8E4M3FNUZ: return 8;
    case DType::kF8E5M2FNUZ: return 8;
    case DType::kF6E2M3: return 6;
    case DType::kF6E3M2: return 6;
    case DType::kF4: return 4;
    case DType::kC64: return 64;
  }
  return 0;
}

bool is_convertible_float(DType dtype) {
  switch (dtype) {
    case DType::kF16:
    case DType::kBF16:
    case DType::kF32:
    case DType::kF64:
    case DType::kF8E4M3:
    case DType::kF8E5M2: return true;
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
    case DType::kC64: return false;
  }
  return false;
}

bool is_loadable(DType dtype) {
  switch (dtype) {
    case DType::kBool:
    case DType::kU8:
    case DType::kI8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF32:
    case DType::kF64:
    case DType::kF8E4M3:
    case DType::kF8E5M2: return true;
    case DType::kU16:
    case DType::kU32:
    case DType::kU64:
    case DType::kF8E8M0:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2FNUZ:
    case DType::kF6E2M3:
    case DType::kF6E3M2:
    case DType::kF4:
    case DType::kC64: return false;
  }
  return false;
}

}  // namespace shardload
