#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "shardload/export.h"
#include "shardload/plan.h"

namespace shardload {

// How a post-processed export's tensor is made of its parameter's elements (EngineUse::
// kExportPostProcessed): as they are, a 2-D weight transposed ([rows, cols] to [cols, rows]), the
// maximum of each row of a float32 [rows, cols] (to [rows]), or the maximum of all (to []).
enum class EngineReduce { kNone, kTranspose, kRowMax, kMax };

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
  EngineReduce reduce = EngineReduce::kNone;
  // Not null: the engine holds two planned parameters as one, this one's rows after `param`'s
  // (same dtype and row size; vLLM's DeepSeek-V3.2 indexer.wk_weights_proj).
  const PlanParam* rows_after = nullptr;
};

// check_engine_plan (what an engine can take) is in shardload/export.h.

// The tensors of `rank`'s files for `engine`, in the plan's order with each buffer after the
// parameter it belongs to. kLayout and kFastdeploy: the exported parameters as they are. `use`
// kExportPostProcessed: SGLang's FP8 layers as its post-processing leaves them on an NVIDIA GPU
// with FP8 (check_engine_plan takes that use for SGLang's FP8 plans only).
std::vector<EngineTensor> engine_tensors(const Plan& plan, const RankPlan& rank, Engine engine,
                                         EngineUse use = EngineUse::kExport);

// The names a layout tensor may have in `engine`'s rank files: its own, and each rename of it by
// one of the engine's families (what an export's reader looks for when a checkpoint may lack it).
std::vector<std::string> engine_names_of(Engine engine, const std::string& layout_name);

// The same list as data, for the engine hooks (shardload.engines.engine_layout) and the weight
// server's manifest (engine_ranks): [{name, dtype, shape, source, source_shape, source_dtype, fill,
// rows}], `source` the planned parameter it is made of (its elements, or its one element repeated
// where `shape` holds more) with its shape and dtype, all three null for a buffer no checkpoint has
// (every element `fill`). A tensor made of two parameters' rows (EngineTensor::rows_after) is two
// entries of the same name, each with its part's shape and `rows` [first row, rows]; else `rows` is
// null.
nlohmann::json engine_tensors_json(const Plan& plan, const RankPlan& rank, Engine engine);

}  // namespace shardload
