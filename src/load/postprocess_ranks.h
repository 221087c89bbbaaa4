#pragma once

#include <vector>

#include "shardload/checkpoint.h"
#include "shardload/loader.h"
#include "shardload/plan.h"

namespace shardload::load {

// Post-processes the modules `modules` marks (all when empty) of every rank, in parallel over
// (rank, module), and marks them processed. Block FP8 modules have nothing to compute but their
// scales to check.
void postprocess_ranks(const Checkpoint& ckpt, const Plan& plan, std::vector<RankWeights>& ranks,
                       const std::vector<bool>& modules, int threads);

}  // namespace shardload::load
