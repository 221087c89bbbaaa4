#pragma once

#include <string>

#include "shardload/tensor.h"

namespace shardload {

// "[a, b]": how every message shows a shape (errors, inspect's table). Defined in tensor.cc.
std::string shape_text(const Shape& shape);

}  // namespace shardload
