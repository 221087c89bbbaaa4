#pragma once

#include <cstdint>
#include <vector>

#include "shardload/plan.h"

namespace shardload::reload {

// Expert slots per EP rank (El), and the logical expert that slot `slot` of `module` holds on rank
// `rank` under `plan`'s map. `module` must be a routed-expert module (moe_layer >= 0).
uint64_t local_slots(const Plan& plan);
int slot_expert(const Plan& plan, int rank, uint32_t module, uint64_t slot);

// The plan of the live weights under a new physical-to-logical map, derived from the live plan
// alone (no checkpoint is opened: it may be gone, and the live bytes need not come from it). Only
// the pieces of routed-expert parameters change: each slot keeps its rank's cut (rows, columns,
// destination) and takes the source tensors of its new expert, which the live plan names wherever
// that expert sits now. This is what make_plan gives for the same checkpoint and map, because the
// planner fills every slot of a rank with the same cut of its expert's tensors. The map must have
// passed validate_layout (every expert placed in every row). Throws Error(kConflict) if the live
// plan does not hold every expert consistently (a plan not made by make_plan).
Plan permute_expert_slots(const Plan& live, const std::vector<std::vector<int>>& map);

}  // namespace shardload::reload
