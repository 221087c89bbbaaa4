#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "shardload/export.h"
#include "shardload/plan.h"

namespace shardload {

// One tensor of a rank file written for an engine (docs/engines.md): a planned parameter under the
// name the engine's model gives it, maybe in another dtype, or a buffer the engine's model holds
// that no checkpoint has (vLLM's attention scales, float32 scalars of value 1).
struct EngineTensor {
  std::string name;
  DType dtype = DType::kBF16;
  Shape shape{};
  // null: a buffer, every element `fill`. Otherwise the parameter's elements; where `shape` holds
  // more (the engines' per-part FP8 scales of a fused layer), the parameter has one element (the
  // layer's merged scale), repeated.
  const PlanParam* param = nullptr;
  float fill = 0;
};

// check_engine_plan (what an engine can take) is in shardload/export.h.

// The tensors of `rank`'s files for `engine`, in the plan's order with each buffer after the
// parameter it belongs to. kLayout and kFastdeploy: the exported parameters as they are.
std::vector<EngineTensor> engine_tensors(const Plan& plan, const RankPlan& rank, Engine engine);

// The same list as data, for the engine hooks (shardload.engines.engine_layout) and the weight
// server's manifest (engine_ranks): [{name, dtype, shape, source, source_shape, source_dtype, fill}],
// `source` the planned parameter it is made of (its elements, or its one element repeated where
// `shape` holds more) with its shape and dtype, all three null for a buffer no checkpoint has (every
// element `fill`).
nlohmann::json engine_tensors_json(const Plan& plan, const RankPlan& rank, Engine engine);

}  // namespace shardload
