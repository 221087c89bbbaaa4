// Applies a new expert placement in place (EPLB) by moving live bytes. Every expert is held by some
// slot of some rank, so each slot whose expert changes is copied from a slot that holds its new
// expert now (of its own rank when it has one), already post-processed and with its scale rows;
// only the per-rank merged input scales are recomputed. Nothing is read from storage: the result is
// what a fresh load of the live weights under the new map gives, even after a filtered update from
// another checkpoint, or once the checkpoint directory is gone.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>

#include "core/parallel_for.h"
#include "core/seconds_since.h"
#include "reload/rebalance_plan.h"
#include "reload/staging.h"
#include "reload/update_steps.h"
#include "shardload/error.h"

namespace shardload {
namespace reload {
namespace {

// The layout's own check of a map (validate_expert_map), plus what a rebalance adds: the live
// buffers never change size, so the map keeps the live number of physical slots.
void check_map(const Plan& plan, const std::vector<std::vector<int>>& map) {
  if (plan.physical_to_logical.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "the model has no routed experts to rebalance");
  }
  const uint64_t slots = validate_expert_map(plan.model, map);
  if (slots != static_cast<uint64_t>(plan.physical_experts)) {
    throw Error(ErrorKind::kInvalidArgument,
                "a rebalance keeps the number of physical slots of the live layout",
                {.field = "physical_to_logical_map",
                 .expected = fmt::format("{} entries per row", plan.physical_experts),
                 .found = fmt::format("{} entries per row", slots)});
  }
}

// A slot of a rank (index into LiveModel::ranks).
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

// One piece that fills a slot: the parameter (index into a rank's params), the source tensor, its
// rows and columns, where it lands within the slot, and its divisor.
using PieceKey = std::array<uint64_t, 8>;
// What fills a slot of a module's parameters on a rank: its pieces. Slots with equal signatures
// hold equal bytes once post-processed, because post-processing is per slot (only the merged input
// scale is per rank; it has no pieces).
using SlotSignature = std::vector<PieceKey>;

SlotSignature slot_signature(const RankPlan& rank, const std::vector<size_t>& params,
                             uint64_t slots, uint64_t slot) {
  SlotSignature out;
  for (size_t k : params) {
    const PlanParam& param = rank.params[k];
    const uint64_t slot_bytes = param.nbytes / slots;
    for (const PlanPiece& piece : param.pieces) {
      if (piece.dst_offset / slot_bytes != slot) continue;
      out.push_back({k, piece.source, piece.row_begin, piece.row_end, piece.col_begin,
                     piece.col_end, piece.dst_offset - slot * slot_bytes, piece.divisor});
    }
  }
  return out;
}

std::span<float> floats(std::byte* base, const PlanParam& param) {
  return {reinterpret_cast<float*>(base + param.offset), param.nbytes / sizeof(float)};
}

// The parameters of each routed-expert module, by index into a rank's params (the same on every
// rank); every one but the merged input scale must have one row per slot.
std::map<uint32_t, std::vector<size_t>> expert_params(const Plan& plan, uint64_t slots) {
  std::map<uint32_t, std::vector<size_t>> out;
  const RankPlan& rank = plan.ranks.front();
  for (size_t k = 0; k < rank.params.size(); ++k) {
    const PlanParam& param = rank.params[k];
    if (plan.modules[param.module].moe_layer < 0) continue;
    if (param.role != ParamRole::kInputScale &&
        (param.nbytes % slots != 0 || param.shape.empty() || param.shape[0] != slots)) {
      throw Error(ErrorKind::kInvalidArgument, "a rebalanced tensor has no expert slot dimension",
                  {.tensor = param.name,
                   .expected = fmt::format("{} slots", slots),
                   .found = fmt::format("{} bytes", param.nbytes)});
    }
    out[param.module].push_back(k);
  }
  return out;
}

// Union-find over units: units that copy a slot another unit rewrites are committed together.
size_t root(std::vector<size_t>& parent, size_t u) {
  while (parent[u] != u) u = parent[u] = parent[parent[u]];
  return u;
}

// The plan of live rank `i` (index into LiveModel::ranks) in `plan`.
const RankPlan& rank_plan(const Plan& plan, const LiveModel& live, size_t i) {
  return plan.ranks[static_cast<size_t>(live.ranks[i].rank)];
}

// One module's slots on every live rank, under the live map and under the new one.
struct ModuleSlots {
  std::vector<std::vector<SlotSignature>> before;  // [rank index][slot]
  std::vector<std::vector<SlotSignature>> after;
  std::map<SlotSignature, std::vector<SlotRef>> holders;  // every slot that holds each expert now

  bool rewritten(const SlotRef& s) const {
    return before[s.rank_index][s.slot] != after[s.rank_index][s.slot];
  }
  bool rank_rewritten(size_t i) const { return before[i] != after[i]; }
};

ModuleSlots module_slots(const LiveModel& live, const Plan& plan, const std::vector<size_t>& params,
                         uint64_t slots) {
  const size_t ranks = live.ranks.size();
  ModuleSlots out;
  out.before.assign(ranks, std::vector<SlotSignature>(slots));
  out.after = out.before;
  for (size_t i = 0; i < ranks; ++i) {
    for (uint64_t j = 0; j < slots; ++j) {
      out.before[i][j] = slot_signature(rank_plan(live.plan, live, i), params, slots, j);
      out.after[i][j] = slot_signature(rank_plan(plan, live, i), params, slots, j);
      out.holders[out.before[i][j]].push_back({i, j});
    }
  }
  return out;
}

// Every copy of a rebalance, as update units with the moves that fill them.
struct MovePlan {
  std::vector<Move> moves;  // moves[u] fills units[u]
  std::vector<Unit> units;
  std::vector<size_t> parent;  // union-find of the units that must commit together
};

// The unit of one rank whose slots of `module` change: the bytes of its rewritten slots, and its
// merged input scale whole (the rank's maximum, recomputed).
Unit rewritten_unit(const RankPlan& rank, size_t i, uint32_t module,
                    const std::vector<size_t>& params, uint64_t slots, const ModuleSlots& state) {
  Unit unit{.rank_index = i, .module = module, .ranges = {}, .bytes = 0, .tensors = 0};
  for (size_t k : params) {
    const PlanParam& param = rank.params[k];
    if (param.exported()) ++unit.tensors;
    if (param.role == ParamRole::kInputScale) {
      add_range(unit, param.offset, param.nbytes);
      continue;
    }
    const uint64_t slot_bytes = param.nbytes / slots;
    for (uint64_t j = 0; j < slots; ++j) {
      if (state.rewritten({i, j})) add_range(unit, param.offset + j * slot_bytes, slot_bytes);
    }
  }
  return unit;
}

// The live slot a rewritten slot copies from: of its own rank first (staged with its unit), then
// one that keeps its expert (never rewritten), then any (whose unit must then commit in the same
// group).
SlotRef pick_holder(const std::vector<SlotRef>& candidates, size_t i, const ModuleSlots& state) {
  auto pick = std::find_if(candidates.begin(), candidates.end(),
                           [&](const SlotRef& s) { return s.rank_index == i; });
  if (pick == candidates.end()) {
    pick = std::find_if(candidates.begin(), candidates.end(),
                        [&](const SlotRef& s) { return !state.rewritten(s); });
  }
  if (pick == candidates.end()) pick = candidates.begin();
  return *pick;
}

// Adds the moves and units of one module: a unit per rank whose slots change, then each rewritten
// slot's source, joining units that read each other's rewritten slots.
void plan_module_moves(const LiveModel& live, const Plan& plan, uint32_t module,
                       const std::vector<size_t>& params, uint64_t slots, MovePlan& out) {
  const ModuleSlots state = module_slots(live, plan, params, slots);
  const size_t ranks = live.ranks.size();
  std::vector<std::optional<size_t>> unit_of(ranks);  // the unit of each rank, if it has one
  const size_t first_move = out.moves.size();
  for (size_t i = 0; i < ranks; ++i) {
    if (!state.rank_rewritten(i)) continue;
    unit_of[i] = out.units.size();
    out.parent.push_back(out.units.size());
    out.moves.push_back({i, module, std::vector<std::optional<SlotRef>>(slots)});
    out.units.push_back(rewritten_unit(rank_plan(plan, live, i), i, module, params, slots, state));
  }
  for (size_t u = first_move; u < out.moves.size(); ++u) {
    Move& move = out.moves[u];
    const size_t i = move.rank_index;
    for (uint64_t j = 0; j < slots; ++j) {
      if (!state.rewritten({i, j})) continue;
      const auto found = state.holders.find(state.after[i][j]);
      if (found == state.holders.end()) {
        throw Error(ErrorKind::kConflict,
                    "no live slot holds the expert a slot needs; nothing was changed",
                    {.tensor = plan.modules[module].name,
                     .field = fmt::format("rank {} slot {}", live.ranks[i].rank, j)});
      }
      const SlotRef from = pick_holder(found->second, i, state);
      move.from[j] = from;
      if (from.rank_index != i && state.rewritten(from)) {
        out.parent[root(out.parent, u)] = root(out.parent, *unit_of[from.rank_index]);
      }
    }
  }
}

// Bytes a move copied from its own rank and from other ranks.
struct CopiedBytes {
  uint64_t local = 0;
  uint64_t remote = 0;
};

// Stages one move into `to` (its rank's staging buffer): copies every rewritten slot from its live
// holder, which no commit has changed yet, and recomputes the merged input scale.
CopiedBytes stage_move(const LiveModel& live, const Plan& plan, const std::vector<size_t>& params,
                       uint64_t slots, const Move& move, std::byte* to) {
  const RankPlan& rank = rank_plan(plan, live, move.rank_index);
  const PlanParam* input = nullptr;
  const PlanParam* input_parts = nullptr;
  CopiedBytes copied;
  for (size_t k : params) {
    const PlanParam& param = rank.params[k];
    if (param.role == ParamRole::kInputScale) {
      input = &param;
      continue;
    }
    if (param.role == ParamRole::kInputScaleParts) {
      // The whole per-part table: the maximum needs the rows of the slots that stay too.
      input_parts = &param;
      std::memcpy(to + param.offset, live.ranks[move.rank_index].buffer.data() + param.offset,
                  param.nbytes);
    }
    const uint64_t slot_bytes = param.nbytes / slots;
    for (uint64_t j = 0; j < slots; ++j) {
      if (!move.from[j]) continue;
      const SlotRef& from = *move.from[j];
      const PlanParam& source = rank_plan(plan, live, from.rank_index).params[k];
      std::memcpy(
          to + param.offset + j * slot_bytes,
          live.ranks[from.rank_index].buffer.data() + source.offset + from.slot * slot_bytes,
          slot_bytes);
      (from.rank_index == move.rank_index ? copied.local : copied.remote) += slot_bytes;
    }
  }
  if (input != nullptr && input_parts != nullptr) {
    // As a load merges it: the maximum over every part of every expert of the rank.
    float m = 0;
    for (float s : floats(to, *input_parts)) m = std::max(m, s);
    std::span<float> merged = floats(to, *input);
    std::fill(merged.begin(), merged.end(), m);
  }
  return copied;
}

}  // namespace
}  // namespace reload

UpdateResult rebalance_experts(LiveModel& live,
                               const std::vector<std::vector<int>>& physical_to_logical,
                               const UpdateOptions& options) {
  using namespace reload;
  const auto start = std::chrono::steady_clock::now();
  check_map(live.plan, physical_to_logical);
  ParallelConfig parallel = live.plan.parallel;
  parallel.expert_map = physical_to_logical;
  validate_layout(live.plan.model, parallel);  // every row places every expert
  Plan plan = permute_expert_slots(live.plan, physical_to_logical);
  const uint64_t slots = local_slots(plan);
  const std::map<uint32_t, std::vector<size_t>> params_of = expert_params(plan, slots);

  MovePlan moves;
  for (const auto& [module, params] : params_of) {
    plan_module_moves(live, plan, module, params, slots, moves);
  }
  std::vector<size_t> together(moves.units.size());
  for (size_t u = 0; u < moves.units.size(); ++u) together[u] = root(moves.parent, u);

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
      const CopiedBytes copied = stage_move(live, plan, params_of.at(move.module), slots, move,
                                            staging.ranks()[move.rank_index].buffer.data());
      local_bytes += copied.local;
      remote_bytes += copied.remote;
    });
    return 0;  // nothing read from storage
  };
  UpdateOptions run_options = options;
  run_options.cancel = nullptr;  // honoured by `stage`, before the first commit only
  UpdateResult result = run_update(live, nullptr, plan, moves.units, stage, run_options, together);
  result.local_bytes = local_bytes;
  result.remote_bytes = remote_bytes;
  live.plan = std::move(plan);  // its parallel config carries the new map
  result.seconds_stage = std::max(0.0, seconds_since(start) - result.seconds_commit);
  return result;
}

}  // namespace shardload
