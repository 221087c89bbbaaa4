// The planning half of a rebalance: which live slot each rewritten slot copies from, over a set of
// ranks that one process or several hold. Every expert is held by some slot of some rank, so each
// slot whose expert changes is copied from a slot that holds its new expert now, already
// post-processed and with its scale rows; only the per-rank merged input scales are recomputed.
#include "reload/rebalance_moves.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <span>

#include "reload/rebalance_plan.h"
#include "shardload/error.h"

namespace shardload::reload {
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

// One piece that fills a slot: the parameter (index into a rank's params), the source tensor, its
// rows and columns, where it lands within the slot, its divisor and whether it is transposed.
using PieceKey = std::array<uint64_t, 10>;
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
                     piece.col_end, piece.dst_offset - slot * slot_bytes, piece.divisor,
                     piece.transposed ? 1u : 0u, piece.dst_pitch});
    }
  }
  return out;
}

// The merged input scale of a routed-expert module (recomputed whole), not a per-slot one.
bool merged_input(const Plan& plan, const PlanParam& param) {
  return param.role == ParamRole::kInputScale && plan.format.merges_input_scale();
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
    if (plan.format.every_expert_table(param.name)) continue;  // every expert's, whatever the placement
    if (!merged_input(plan, param) &&
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

const RankPlan& rank_plan(const Plan& plan, const RankSet& set, size_t i) {
  return plan.ranks[static_cast<size_t>(set.ranks[i])];
}

// One module's slots on every rank of the set, under the live map and under the new one.
struct ModuleSlots {
  std::vector<std::vector<SlotSignature>> before;  // [rank index][slot]
  std::vector<std::vector<SlotSignature>> after;
  std::map<SlotSignature, std::vector<SlotRef>> holders;  // every slot that holds each expert now

  bool rewritten(const SlotRef& s) const {
    return before[s.rank_index][s.slot] != after[s.rank_index][s.slot];
  }
  bool rank_rewritten(size_t i) const { return before[i] != after[i]; }
};

ModuleSlots module_slots(const Plan& live, const Plan& plan, const RankSet& set,
                         const std::vector<size_t>& params, uint64_t slots) {
  const size_t ranks = set.ranks.size();
  ModuleSlots out;
  out.before.assign(ranks, std::vector<SlotSignature>(slots));
  out.after = out.before;
  for (size_t i = 0; i < ranks; ++i) {
    for (uint64_t j = 0; j < slots; ++j) {
      out.before[i][j] = slot_signature(rank_plan(live, set, i), params, slots, j);
      out.after[i][j] = slot_signature(rank_plan(plan, set, i), params, slots, j);
      out.holders[out.before[i][j]].push_back({i, j});
    }
  }
  return out;
}

// The unit of one rank whose slots of `module` change: the bytes of its rewritten slots, and its
// merged input scale whole (the rank's maximum, recomputed).
Unit rewritten_unit(const Plan& plan, const RankPlan& rank, size_t i, uint32_t module,
                    const std::vector<size_t>& params, uint64_t slots, const ModuleSlots& state) {
  Unit unit{.rank_index = i, .module = module, .ranges = {}, .bytes = 0, .tensors = 0};
  for (size_t k : params) {
    const PlanParam& param = rank.params[k];
    if (param.exported()) ++unit.tensors;
    if (merged_input(plan, param)) {
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
// of its own node (a local copy), one that keeps its expert (never rewritten) before one that is
// rewritten (whose unit must then commit in the same group); then the same on other nodes.
SlotRef pick_holder(const std::vector<SlotRef>& candidates, size_t i, const RankSet& set,
                    const ModuleSlots& state) {
  auto pick = std::find_if(candidates.begin(), candidates.end(),
                           [&](const SlotRef& s) { return s.rank_index == i; });
  const int node = set.node_of[i];
  for (const bool same_node : {true, false}) {
    for (const bool kept : {true, false}) {
      if (pick != candidates.end()) return *pick;
      pick = std::find_if(candidates.begin(), candidates.end(), [&](const SlotRef& s) {
        return (set.node_of[s.rank_index] == node) == same_node && (!kept || !state.rewritten(s));
      });
    }
  }
  return pick != candidates.end() ? *pick : candidates.front();
}

// Adds the moves and units of one module: a unit per rank whose slots change, then each rewritten
// slot's source, joining units that read each other's rewritten slots.
void plan_module_moves(const Plan& live, const RankSet& set, uint32_t module,
                       const std::vector<size_t>& params, MovePlan& out,
                       std::vector<size_t>& parent) {
  const ModuleSlots state = module_slots(live, out.plan, set, params, out.slots);
  const size_t ranks = set.ranks.size();
  std::vector<std::optional<size_t>> unit_of(ranks);  // the unit of each rank, if it has one
  const size_t first_move = out.moves.size();
  for (size_t i = 0; i < ranks; ++i) {
    if (!state.rank_rewritten(i)) continue;
    unit_of[i] = out.units.size();
    parent.push_back(out.units.size());
    out.moves.push_back({i, module, std::vector<std::optional<SlotRef>>(out.slots)});
    out.units.push_back(
        rewritten_unit(out.plan, rank_plan(out.plan, set, i), i, module, params, out.slots, state));
  }
  for (size_t u = first_move; u < out.moves.size(); ++u) {
    Move& move = out.moves[u];
    const size_t i = move.rank_index;
    for (uint64_t j = 0; j < out.slots; ++j) {
      if (!state.rewritten({i, j})) continue;
      const auto found = state.holders.find(state.after[i][j]);
      if (found == state.holders.end()) {
        throw Error(ErrorKind::kConflict,
                    "no live slot holds the expert a slot needs; nothing was changed",
                    {.tensor = out.plan.modules[module].name,
                     .field = fmt::format("rank {} slot {}", set.ranks[i], j)});
      }
      const SlotRef from = pick_holder(found->second, i, set, state);
      move.from[j] = from;
      if (from.rank_index != i && state.rewritten(from)) {
        parent[root(parent, u)] = root(parent, *unit_of[from.rank_index]);
      }
    }
  }
}

}  // namespace

MovePlan plan_rebalance(const Plan& live, const std::vector<std::vector<int>>& map,
                        const RankSet& set) {
  check_map(live, map);
  ParallelConfig parallel = live.parallel;
  parallel.expert_map = map;
  validate_layout(live.model, parallel);  // every row places every expert
  MovePlan out{.plan = permute_expert_slots(live, map),
               .slots = 0,
               .params_of = {},
               .moves = {},
               .units = {},
               .together = {}};
  out.slots = local_slots(out.plan);
  out.params_of = expert_params(out.plan, out.slots);
  std::vector<size_t> parent;
  for (const auto& [module, params] : out.params_of) {
    plan_module_moves(live, set, module, params, out, parent);
  }
  out.together.resize(out.units.size());
  for (size_t u = 0; u < out.units.size(); ++u) out.together[u] = root(parent, u);
  return out;
}

std::vector<size_t> copied_params(const MovePlan& moves, uint32_t module, int rank) {
  std::vector<size_t> out;
  for (size_t k : moves.params_of.at(module)) {
    if (!merged_input(moves.plan, moves.plan.ranks[static_cast<size_t>(rank)].params[k])) {
      out.push_back(k);
    }
  }
  return out;
}

CopiedBytes stage_move(const MovePlan& moves, const RankSet& set, const Move& move,
                       const SlotSource& source, const std::byte* own_live, std::byte* to) {
  const RankPlan& rank = rank_plan(moves.plan, set, move.rank_index);
  const PlanParam* input = nullptr;
  const PlanParam* input_parts = nullptr;
  CopiedBytes copied;
  for (size_t k : moves.params_of.at(move.module)) {
    const PlanParam& param = rank.params[k];
    if (merged_input(moves.plan, param)) {
      input = &param;
      continue;
    }
    if (param.role == ParamRole::kInputScaleParts) {
      // The whole per-part table: the maximum needs the rows of the slots that stay too.
      input_parts = &param;
      std::memcpy(to + param.offset, own_live + param.offset, param.nbytes);
    }
    const uint64_t slot_bytes = param.nbytes / moves.slots;
    for (uint64_t j = 0; j < moves.slots; ++j) {
      if (!move.from[j]) continue;
      const SlotRef& from = *move.from[j];
      std::memcpy(to + param.offset + j * slot_bytes, source(from.rank_index, k, from.slot),
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

}  // namespace shardload::reload
