#pragma once

#include <functional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "shardload/plan.h"

namespace shardload {

// The plan of a checkpoint that is not at hand, from its config.json alone: what an export's rank
// files are checked against (the export keeps config.json, not the checkpoint). Every source is
// taken to be there with the shape config.json implies (an FP8 checkpoint's linear weights
// F8_E4M3, scales F32, the rest config.json's dtype: none of these decides a rank tensor); an
// optional parameter (one a checkpoint may lack) is planned when optional_present(its rank tensor
// name) says so. The sources name no file: the plan gives rank tensors' names, dtypes and shapes and
// is never read from. Throws what make_plan throws for the config and the layout.
Plan plan_from_config(const nlohmann::json& config, const ParallelConfig& parallel,
                      const std::function<bool(std::string_view)>& optional_present);

}  // namespace shardload
