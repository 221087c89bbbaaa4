#pragma once

#include <pybind11/pybind11.h>

#include "shardload/plan.h"

namespace shardload::python {

// A layout from Python keyword arguments, with the command line's names and meanings (tp, ep, dp,
// dp_style, enable_dp_lm_head, moe_dense_tp_size, moe_a2a_backend, enable_expert_parallel,
// redundant_experts, expert_map (a path or a list of rows), row_bias, split_shared_experts, dtype,
// quantization). An unknown keyword is a TypeError naming it; a bad value is shardload's
// InvalidArgumentError.
ParallelConfig layout_from_kwargs(const pybind11::kwargs& kwargs);

// The keywords layout_from_kwargs takes, for callers that accept others beside them.
bool is_layout_keyword(const std::string& name);

}  // namespace shardload::python
