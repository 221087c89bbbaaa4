#pragma once

#include <optional>
#include <string_view>

#include "shardload/dtype.h"

namespace shardload {

// PyTorch spelling of a model dtype, as config.json's torch_dtype and the engines' --dtype write
// it: bfloat16, float16 or half, float32 or float. The one list of these names (config.json and
// --dtype); others: nullopt.
std::optional<DType> torch_dtype_from_name(std::string_view name);

// A --dtype value (the command line's and the Python package's): the names above or shardload's short
// ones, bf16, fp16, fp32 ("auto" is the caller's to handle).
std::optional<DType> model_dtype_from_flag(std::string_view name);

}  // namespace shardload
