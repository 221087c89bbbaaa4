// Applies a new expert placement in place (EPLB) by moving live bytes. Every expert is held by some
// slot of some rank, so each slot whose expert changes is copied from a slot that holds its new
// expert now (of its own rank when it has one), already post-processed and with its scale rows;
// only the per-rank merged input scales are recomputed. Nothing is read from storage: the result is
// what a fresh load of the live weights under the new map gives, even after a filtered update from
// another checkpoint, or once the checkpoint directory is gone.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include "core/parallel_for.h"
#include "core/seconds_since.h"
#include "reload/rebalance_moves.h"
#include "reload/update_steps.h"
#include "shardload/error.h"

namespace shardload {

UpdateResult rebalance_experts(LiveModel& live,
                               const std::vector<std::vector<int>>& physical_to_logical,
                               const UpdateOptions& options) {
  using namespace reload;
  const auto start = std::chrono::steady_clock::now();
  RankSet set;
  for (const RankWeights& weights : live.ranks) {
    set.ranks.push_back(weights.rank);
    set.node_of.push_back(0);
  }
  MovePlan moves = plan_rebalance(live.plan, physical_to_logical, set);
  const SlotSource source = [&](size_t i, size_t k, uint64_t slot) -> const std::byte* {
    const PlanParam& param = moves.plan.ranks[static_cast<size_t>(set.ranks[i])].params[k];
    return live.ranks[i].buffer.data() + param.offset + slot * (param.nbytes / moves.slots);
  };

  std::atomic<uint64_t> local_bytes{0};
  std::atomic<uint64_t> remote_bytes{0};
  bool first_group = true;
  const StageGroup stage = [&](Staging& staging, const std::vector<size_t>& group) -> uint64_t {
    // A rebalance can only be cancelled before its first commit: once slots moved, a stop between
    // groups would leave a placement no map describes.
    if (first_group && options.cancel != nullptr && options.cancel->load()) {
      throw Error(ErrorKind::kCancelled, "the rebalance was cancelled before its commit");
    }
    first_group = false;
    // A slot rewritten by another unit is read in the same group as that unit (group_units keeps
    // them together), before any commit changes it.
    parallel_for(group.size(), options.threads, [&](size_t g, int) {
      const Move& move = moves.moves[group[g]];
      const CopiedBytes copied =
          stage_move(moves, set, move, source, live.ranks[move.rank_index].buffer.data(),
                     staging.ranks()[move.rank_index].buffer.data());
      local_bytes += copied.local;
      remote_bytes += copied.remote;
    });
    return 0;  // nothing read from storage
  };
  UpdateOptions run_options = options;
  run_options.cancel = nullptr;  // honoured by `stage`, before the first commit only
  UpdateResult result =
      run_update(live, nullptr, moves.plan, moves.units, stage, run_options, moves.together);
  result.local_bytes = local_bytes;
  result.remote_bytes = remote_bytes;
  live.plan = std::move(moves.plan);  // its parallel config carries the new map
  result.seconds_stage = std::max(0.0, seconds_since(start) - result.seconds_commit);
  return result;
}

}  // namespace shardload
