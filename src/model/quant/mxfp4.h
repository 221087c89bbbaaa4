#pragma once

// MXFP4 (OCP microscaling FP4) routed experts, as gpt-oss's and DeepSeek-V4's checkpoints store them.
#include "shardload/weight_format.h"

namespace shardload {

// E2M1 codes two a byte with one E8M0 scale per 32 values.
const ExpertFormat& mxfp4_format();

}  // namespace shardload
