#include "core/torch_dtype.h"

namespace shardload {

std::optional<DType> torch_dtype_from_name(std::string_view name) {
  if (name == "bfloat16") return DType::kBF16;
  if (name == "float16" || name == "half") return DType::kF16;
  if (name == "float32" || name == "float") return DType::kF32;
  return std::nullopt;
}

std::optional<DType> model_dtype_from_flag(std::string_view name) {
  if (name == "bf16") return DType::kBF16;
  if (name == "fp16") return DType::kF16;
  if (name == "fp32") return DType::kF32;
  return torch_dtype_from_name(name);
}

}  // namespace shardload
