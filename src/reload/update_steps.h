#pragma once

#include <functional>
#include <string>
#include <vector>

#include "reload/staging.h"
#include "shardload/checkpoint.h"
#include "shardload/reload.h"

namespace shardload::reload {

// Plans `checkpoint` under the live layout (dtype pinned to the live dtype) and checks that it fits
// the live buffers exactly. Throws Error(kConflict) naming the first tensor that does not.
Plan plan_update(const Checkpoint& checkpoint, const LiveModel& live,
                 const ParallelConfig& parallel);

// Per source of `plan`, whether `filter` selects it. Throws Error(kTensorNotFound) naming
// `model_path` when it selects none.
std::vector<bool> select_sources(const Plan& plan, const WeightFilter& filter,
                                 const std::string& model_path);

// Each (rank, module) of the live ranks that a selected tensor (selected[source]) feeds, with the
// module's whole byte range: a fused or requantized module is rewritten whole (its merged scales
// need every part).
std::vector<Unit> units_for(const LiveModel& live, const Plan& plan,
                            const std::vector<bool>& selected);

// Fills the staging of one commit group; returns the checkpoint bytes read.
using StageGroup = std::function<uint64_t(Staging& staging, const std::vector<size_t>& group)>;

// The common frame of updates and rebalancing: groups the units under the staging bound (`together`
// as group_units takes it), then per group stages, checks that no file of `checkpoint` changed
// (nullptr: nothing is read from storage) and that nothing cancelled, and commits; counts the
// version.
UpdateResult run_update(LiveModel& live, const Checkpoint* checkpoint, const Plan& plan,
                        const std::vector<Unit>& units, const StageGroup& stage,
                        const UpdateOptions& options, const std::vector<size_t>& together = {});

}  // namespace shardload::reload
