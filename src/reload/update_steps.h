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

// The filter's choice of the checkpoint tensors of a plan (one entry per Plan::sources).
struct SourceSelection {
  std::vector<bool> selected;
  // Selected by its (layer, expert) alone, not by name: it rewrites the expert slots it fills, not
  // its whole module.
  std::vector<bool> expert_only;
};

// What the filter selects of `plan`'s sources. Throws Error(kTensorNotFound) naming `model_path`
// when it selects none.
SourceSelection select_sources(const Plan& plan, const WeightFilter& filter,
                               const std::string& model_path);

// Each (rank, module) of the live ranks that a selected tensor feeds. A tensor selected by name
// rewrites its module whole, all its byte range (a fused or requantized module: its merged scales
// need every part). A tensor selected by its expert alone rewrites only the slots of that expert
// in a routed-expert module (Unit::slots: every replica, wherever the expert map puts them), plus
// the module's merged input scale, the maximum over the rank's experts.
std::vector<Unit> units_for(const LiveModel& live, const Plan& plan,
                            const SourceSelection& selection);

// Whether an update stages `piece` of `param` for `unit` (of the param's module): every piece of a
// whole module, the pieces of the unit's slots of another.
bool unit_reads(const Plan& plan, const Unit& unit, const PlanParam& param, const PlanPiece& piece);

// `plan` with only the pieces an update reads, on every rank of the layout (what the striped reads
// of an update on several nodes assign, the same on every node).
Plan pieces_to_read(const Plan& plan, const SourceSelection& selection);

// Post-processes one unit in `staged` (its rank's staging mirror) once its pieces are read. A unit
// of expert slots post-processes those slots alone; its merged input scale is the maximum over the
// rank's per-part input scales (internal rows kept in the rank buffer since the load), the kept
// slots' rows taken from `live` (its rank's live buffer).
void postprocess_unit(const Plan& plan, const Unit& unit, const std::byte* live,
                      RankWeights& staged, const Checkpoint* checkpoint);

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
