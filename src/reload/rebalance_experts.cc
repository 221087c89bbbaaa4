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
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>

#include "core/parallel_for.h"
#include "core/seconds_since.h"
#include "reload/rebalance_plan.h"
#include "reload/staging.h"
#include "reload/update_steps.h"
#include "shardload/error.h"

namespace shardload {
namespace reload {
namespace {

void check_map(const Plan& plan, const std::vector<std::vector<int>>& map) {
  if (plan.physical_to_logical.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "the model has no routed experts to rebalance");
  }
  if (map.size() != plan.physical_to_logical.size()) {
    throw Error(ErrorKind::kInvalidArgument, "the expert map needs one row per MoE layer",
                {.field = "physical_to_logical_map",
                 .expected = fmt::format("{} rows", plan.physical_to_logical.size()),
                 .found = fmt::format("{} rows", map.size())});
  }
  const int experts = static_cast<int>(plan.model.experts);
  for (size_t layer = 0; layer < map.size(); ++layer) {
    if (map[layer].size() != static_cast<size_t>(plan.physical_experts)) {
      throw Error(ErrorKind::kInvalidArgument,
                  "a row of the expert map does not have one entry per physical slot",
                  {.field = fmt::format("physical_to_logical_map[{}]", layer),
                   .expected = fmt::format("{} entries", plan.physical_experts),
                   .found = fmt::format("{} entries", map[layer].size())});
    }
    for (size_t p = 0; p < map[layer].size(); ++p) {
      if (map[layer][p] < 0 || map[layer][p] >= experts) {
        throw Error(ErrorKind::kInvalidArgument, "the expert map names an unknown expert",
                    {.field = fmt::format("physical_to_logical_map[{}][{}]", layer, p),
                     .expected = fmt::format("0 <= expert < {}", experts),
                     .found = fmt::format("{}", map[layer][p])});
      }
    }
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

// What fills slot `slot` of a module's parameters on a rank: the source tensors, cuts and places of
// its pieces. Slots with equal signatures hold equal bytes once post-processed, because
// post-processing is per slot (only the merged input scale is per rank; it has no pieces).
std::string slot_signature(const RankPlan& rank, const std::vector<size_t>& params, uint64_t slots,
                           uint64_t slot) {
  std::string out;
  for (size_t k : params) {
    const PlanParam& param = rank.params[k];
    const uint64_t slot_bytes = param.nbytes / slots;
    for (const PlanPiece& piece : param.pieces) {
      if (piece.dst_offset / slot_bytes != slot) continue;
      out += fmt::format("{}:{}:{}-{}:{}-{}@{}/{};", k, piece.source, piece.row_begin,
                         piece.row_end, piece.col_begin, piece.col_end,
                         piece.dst_offset - slot * slot_bytes, piece.divisor);
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
  const size_t ranks = live.ranks.size();
  auto old_rank = [&](size_t i) -> const RankPlan& {
    return live.plan.ranks[static_cast<size_t>(live.ranks[i].rank)];
  };
  auto new_rank = [&](size_t i) -> const RankPlan& {
    return plan.ranks[static_cast<size_t>(live.ranks[i].rank)];
  };

  std::vector<Move> moves;
  std::vector<Unit> units;
  std::vector<size_t> parent;
  for (const auto& [module, params] : params_of) {
    std::vector<std::vector<std::string>> before(ranks, std::vector<std::string>(slots));
    std::vector<std::vector<std::string>> after = before;
    // Every slot that holds each expert now, by what fills it.
    std::unordered_map<std::string, std::vector<SlotRef>> holders;
    for (size_t i = 0; i < ranks; ++i) {
      for (uint64_t j = 0; j < slots; ++j) {
        before[i][j] = slot_signature(old_rank(i), params, slots, j);
        after[i][j] = slot_signature(new_rank(i), params, slots, j);
        holders[before[i][j]].push_back({i, j});
      }
    }
    auto rewritten = [&](const SlotRef& s) {
      return before[s.rank_index][s.slot] != after[s.rank_index][s.slot];
    };
    std::vector<size_t> unit_of(ranks, SIZE_MAX);
    const size_t first_move = moves.size();
    for (size_t i = 0; i < ranks; ++i) {
      Move move{i, module, std::vector<std::optional<SlotRef>>(slots)};
      Unit unit{.rank_index = i, .module = module, .ranges = {}, .bytes = 0, .tensors = 0};
      bool any = false;
      for (uint64_t j = 0; j < slots; ++j) any = any || rewritten({i, j});
      if (!any) continue;
      for (size_t k : params) {
        const PlanParam& param = new_rank(i).params[k];
        if (param.exported()) ++unit.tensors;
        if (param.role == ParamRole::kInputScale) {
          add_range(unit, param.offset, param.nbytes);  // the rank's maximum: recomputed whole
          continue;
        }
        const uint64_t slot_bytes = param.nbytes / slots;
        for (uint64_t j = 0; j < slots; ++j) {
          if (rewritten({i, j})) add_range(unit, param.offset + j * slot_bytes, slot_bytes);
        }
      }
      unit_of[i] = units.size();
      parent.push_back(units.size());
      moves.push_back(std::move(move));
      units.push_back(std::move(unit));
    }
    for (size_t u = first_move; u < moves.size(); ++u) {
      Move& move = moves[u];
      const size_t i = move.rank_index;
      for (uint64_t j = 0; j < slots; ++j) {
        if (!rewritten({i, j})) continue;
        const auto found = holders.find(after[i][j]);
        if (found == holders.end()) {
          throw Error(ErrorKind::kConflict,
                      "no live slot holds the expert a slot needs; nothing was changed",
                      {.tensor = plan.modules[module].name,
                       .field = fmt::format("rank {} slot {}", live.ranks[i].rank, j)});
        }
        // Own rank first (staged with this unit), then a slot that keeps its expert (never
        // rewritten), then any: that slot's unit must then commit in the same group as this one.
        const std::vector<SlotRef>& candidates = found->second;
        auto pick = std::find_if(candidates.begin(), candidates.end(),
                                 [&](const SlotRef& s) { return s.rank_index == i; });
        if (pick == candidates.end()) {
          pick = std::find_if(candidates.begin(), candidates.end(),
                              [&](const SlotRef& s) { return !rewritten(s); });
        }
        if (pick == candidates.end()) pick = candidates.begin();
        move.from[j] = *pick;
        if (pick->rank_index != i && rewritten(*pick)) {
          parent[root(parent, u)] = root(parent, unit_of[pick->rank_index]);
        }
      }
    }
  }
  std::vector<size_t> together(units.size());
  for (size_t u = 0; u < units.size(); ++u) together[u] = root(parent, u);

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
    // Copies read live slots, which no commit has changed yet: a slot rewritten by another unit is
    // read in the same group as that unit (group_units keeps them together).
    parallel_for(group.size(), options.threads, [&](size_t g, int) {
      const Move& move = moves[group[g]];
      const RankPlan& rank = new_rank(move.rank_index);
      std::byte* to = staging.ranks()[move.rank_index].buffer.data();
      const PlanParam* input = nullptr;
      const PlanParam* input_parts = nullptr;
      uint64_t local = 0;
      uint64_t remote = 0;
      for (size_t k : params_of.at(move.module)) {
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
          const PlanParam& source = new_rank(from.rank_index).params[k];
          std::memcpy(
              to + param.offset + j * slot_bytes,
              live.ranks[from.rank_index].buffer.data() + source.offset + from.slot * slot_bytes,
              slot_bytes);
          (from.rank_index == move.rank_index ? local : remote) += slot_bytes;
        }
      }
      if (input != nullptr && input_parts != nullptr) {
        // As a load merges it: the maximum over every part of every expert of the rank.
        float m = 0;
        for (float s : floats(to, *input_parts)) m = std::max(m, s);
        std::span<float> merged = floats(to, *input);
        std::fill(merged.begin(), merged.end(), m);
      }
      local_bytes += local;
      remote_bytes += remote;
    });
    return 0;  // nothing read from storage
  };
  UpdateOptions run_options = options;
  run_options.cancel = nullptr;  // honoured by `stage`, before the first commit only
  UpdateResult result = run_update(live, nullptr, plan, units, stage, run_options, together);
  result.local_bytes = local_bytes;
  result.remote_bytes = remote_bytes;
  live.plan = std::move(plan);  // its parallel config carries the new map
  result.seconds_stage = std::max(0.0, seconds_since(start) - result.seconds_commit);
  return result;
}

}  // namespace shardload
