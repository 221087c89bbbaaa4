#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace shardload {

// Every dtype the safetensors crate knows. Only the ones marked "loadable" can be model tensors;
// the others are accepted by `inspect` (validation still checks their sizes).
enum class DType : uint8_t {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kI32,
  kU32,
  kI64,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kF8E4M3,  // e4m3fn: no infinities, NaN = 0x7F/0xFF, max 448
  kF8E5M2,
  kF8E8M0,
  kF8E4M3FNUZ,  // AMD flavour: no infinities, no negative zero, NaN = 0x80
  kF8E5M2FNUZ,
  kF6E2M3,
  kF6E3M2,
  kF4,
  kC64,
};

inline constexpr DType kAllDTypes[] = {
    DType::kBool, DType::kU8,    DType::kI8,     DType::kI16,    DType::kU16,
    DType::kI32,  DType::kU32,   DType::kI64,    DType::kU64,    DType::kF16,
    DType::kBF16, DType::kF32,   DType::kF64,    DType::kF8E4M3, DType::kF8E5M2,
    DType::kF8E8M0, DType::kF8E4M3FNUZ, DType::kF8E5M2FNUZ, DType::kF6E2M3, DType::kF6E3M2,
    DType::kF4,   DType::kC64,
};

// Safetensors spelling: "BOOL", "U8", ..., "F8_E4M3", "F8_E4M3FNUZ", "BF16".
std::string_view dtype_name(DType dtype);
std::optional<DType> parse_dtype(std::string_view name);

// Size of one element in bits (4 for F4, 6 for F6_*); byte sizes only make sense for whole-byte dtypes.
size_t dtype_bits(DType dtype);

// Floating types between which convert() works: F16, BF16, F32, F64, F8_E4M3, F8_E5M2.
bool is_convertible_float(DType dtype);

// Dtypes a model tensor may have: BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64, F8_E4M3, F8_E5M2.
bool is_loadable(DType dtype);

}  // namespace shardload
