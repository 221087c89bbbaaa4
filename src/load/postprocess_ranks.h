#pragma once

#include <vector>

#include "shardload/checkpoint.h"
#include "shardload/loader.h"
#include "shardload/plan.h"

namespace shardload::load {

// Post-processes the modules `modules` marks (all when empty) of every rank, in parallel over
// (rank, module), and marks them processed. Block FP8 modules have nothing to compute but their
// scales to check.
// postprocess_modules on a rank whose byte 0 is at `base` (param offsets count from there): the
// device loader post-processes windows of a rank in a staging buffer, never the whole rank at once.
void postprocess_modules_at(const Plan& plan, int rank, std::byte* base, std::vector<uint8_t>& processed,
                            const std::vector<uint32_t>& modules, PostprocessMode mode,
                            const Checkpoint* checkpoint);

// Post-processes only slots `slots` of routed-expert module `module` (every parameter but the
// merged input scale has one row per slot): what an expert-filtered update stages, without touching
// the slots it keeps. The merged input scale is still the maximum over the whole per-part table, so
// the caller fills the kept slots' rows of it (from the live rank) first. Does not mark the module
// processed.
void postprocess_expert_slots(const Plan& plan, int rank, std::byte* base, uint32_t module,
                              const std::vector<uint64_t>& slots, const Checkpoint* checkpoint);

void postprocess_ranks(const Checkpoint& ckpt, const Plan& plan, std::vector<RankWeights>& ranks,
                       const std::vector<bool>& modules, int threads);

}  // namespace shardload::load
