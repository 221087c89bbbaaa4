#pragma once

#include <vector>

#include "shardload/distributed.h"

namespace shardload::distributed {

// The striped half of load_node: fills `ranks` (this node's block, allocated) with the chunks this
// node reads and those the others send it, post-processes them and fills `stats`' bytes, seconds
// and read path. Collective; throws PeerFailed when it stopped for a peer's error.
void load_striped(const Checkpoint& ckpt, const Plan& plan, const ReadAssignment& reads,
                  Transport& transport, const LoadOptions& options, std::vector<RankWeights>& ranks,
                  NodeLoadStats& stats);

}  // namespace shardload::distributed
