#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "reload/staging.h"
#include "shardload/plan.h"

namespace shardload::reload {

// The copies of a rebalance, planned over a set of ranks that may live in several processes: the
// single-node rebalance plans over its live ranks, a cluster over every rank of the layout (each
// node then stages the moves of its own ranks). Ranks are named by index into `RankSet::ranks`.
struct RankSet {
  std::vector<int> ranks;    // the plan rank of each index
  std::vector<int> node_of;  // the node holding each index (all 0 on one node)
};

// A slot of a rank (index into RankSet::ranks).
struct SlotRef {
  size_t rank_index = 0;
  uint64_t slot = 0;
};

// One (rank, module) whose placement changes: per slot, the live slot its new bytes are copied from
// (none: the slot keeps its expert and is not written).
struct Move {
  size_t rank_index = 0;
  uint32_t module = 0;
  std::vector<std::optional<SlotRef>> from;
};

// Every copy of a rebalance: moves[u] fills units[u] (whose rank_index is the move's); units that
// copy a slot another unit rewrites share a `together` id, so that a bounded staging commits them
// in one group.
struct MovePlan {
  Plan plan;                                          // the live plan under the new map
  uint64_t slots;                                     // expert slots per EP rank
  std::map<uint32_t, std::vector<size_t>> params_of;  // routed-expert module -> its params (index)
  std::vector<Move> moves;
  std::vector<Unit> units;
  std::vector<size_t> together;
};

// Checks the map (the layout's own check, and the live number of slots) and plans the moves.
// Each rewritten slot copies from a holder of its new expert: its own rank first, then a slot of
// its node that keeps its expert, then any of its node, then one of another node that keeps its
// expert, then any. Throws Error before any change.
MovePlan plan_rebalance(const Plan& live, const std::vector<std::vector<int>>& map,
                        const RankSet& set);

// The live bytes of slot `slot` of param `param` (index into the rank's params) of rank index
// `rank_index`, slot_bytes long.
using SlotSource = std::function<const std::byte*(size_t rank_index, size_t param, uint64_t slot)>;

// Bytes a move copied from its own rank and from other ranks.
struct CopiedBytes {
  uint64_t local = 0;
  uint64_t remote = 0;
};

// Stages one move into `to` (its rank's staging buffer): copies every rewritten slot from `source`
// (live bytes no commit has changed yet) and recomputes the merged input scale from the rank's own
// live table `own_live` (its live buffer).
CopiedBytes stage_move(const MovePlan& moves, const RankSet& set, const Move& move,
                       const SlotSource& source, const std::byte* own_live, std::byte* to);

// The params a move copies slot by slot (every routed-expert param but the merged input scale), in
// the order stage_move copies them: what crosses between nodes.
std::vector<size_t> copied_params(const MovePlan& moves, uint32_t module, int rank);

}  // namespace shardload::reload
