#pragma once

#include <vector>

#include "shardload/distributed.h"

namespace shardload::distributed {

// The striped pipeline alone: fills the plan's pieces of `ranks` (this node's, allocated) with the
// chunks this node reads and those the others send it, and fills `stats`' bytes, seconds and read
// path; no post-processing. An update passes a plan that keeps only the pieces it rewrites and
// staging buffers as `ranks`. Collective; throws PeerFailed when it stopped for a peer's error.
void fill_striped(const Checkpoint& ckpt, const Plan& plan, const ReadAssignment& reads,
                  Transport& transport, const LoadOptions& options, std::vector<RankWeights>& ranks,
                  NodeLoadStats& stats);

// The striped half of load_node: fills `ranks` (this node's block, allocated) with the chunks this
// node reads and those the others send it, post-processes them and fills `stats`' bytes, seconds
// and read path. Collective; throws PeerFailed when it stopped for a peer's error.
void load_striped(const Checkpoint& ckpt, const Plan& plan, const ReadAssignment& reads,
                  Transport& transport, const LoadOptions& options, std::vector<RankWeights>& ranks,
                  NodeLoadStats& stats);

}  // namespace shardload::distributed
