#pragma once

#include <cstddef>
#include <optional>

#include "shardload/dtype.h"

namespace shardload::dtype_internal {

// The dtypes convert() handles, so that its dispatch switches over six values instead of every
// DType.
enum class FloatType { kF16, kBF16, kF32, kF64, kF8E4M3, kF8E5M2 };

// nullopt for dtypes that are not convertible floats (see is_convertible_float).
std::optional<FloatType> to_float_type(DType dtype);

size_t float_type_size(FloatType type);

}  // namespace shardload::dtype_internal
