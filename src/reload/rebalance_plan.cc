// The plan of a new expert placement, from the live plan: a rebalance reads no checkpoint, so it
// cannot re-plan one; the planner's expert slots differ only in their expert's source tensors.
#include "reload/rebalance_plan.h"

#include <fmt/format.h>

#include <optional>

#include "shardload/error.h"

namespace shardload::reload {
namespace {

Error inconsistent(const PlanParam& param, std::string what) {
  return Error(ErrorKind::kConflict,
               "the live plan does not place experts the way the planner does; nothing was changed",
               {.tensor = param.name, .found = std::move(what)});
}

}  // namespace

uint64_t local_slots(const Plan& plan) {
  return static_cast<uint64_t>(plan.physical_experts / plan.parallel.ep);
}

int slot_expert(const Plan& plan, int rank, uint32_t module, uint64_t slot) {
  const RankPlan& r = plan.ranks.at(static_cast<size_t>(rank));
  const std::vector<int>& row =
      plan.physical_to_logical.at(static_cast<size_t>(plan.modules.at(module).moe_layer));
  return row.at(static_cast<size_t>(r.ep_rank) * local_slots(plan) + slot);
}

Plan permute_expert_slots(const Plan& live, const std::vector<std::vector<int>>& map) {
  Plan next = live;
  next.parallel.expert_map = map;
  next.physical_to_logical = map;
  const uint64_t slots = local_slots(live);
  const size_t experts = live.model.experts;
  // The source tensors of each logical expert, per parameter index (the same on every rank), in the
  // order of a slot's pieces: read from whichever slot holds the expert now. They do not depend on
  // the rank (only the cut does), so every copy of an expert must agree.
  const size_t params = live.ranks.empty() ? 0 : live.ranks.front().params.size();
  std::vector<std::vector<std::optional<std::vector<uint32_t>>>> sources(params);
  for (const RankPlan& rank : live.ranks) {
    if (rank.params.size() != params) {
      throw Error(ErrorKind::kConflict, "the live plan's ranks have different tensors",
                  {.field = fmt::format("rank {}", rank.rank)});
    }
    for (size_t k = 0; k < params; ++k) {
      const PlanParam& param = rank.params[k];
      if (live.modules[param.module].moe_layer < 0 || param.pieces.empty()) continue;
      if (live.format.every_expert_table(param.name)) continue;  // every expert's, under any map
      if (param.nbytes % slots != 0) throw inconsistent(param, "no expert slot dimension");
      const uint64_t slot_bytes = param.nbytes / slots;
      std::vector<std::vector<uint32_t>> by_slot(slots);
      for (const PlanPiece& piece : param.pieces) {
        by_slot.at(piece.dst_offset / slot_bytes).push_back(piece.source);
      }
      sources[k].resize(experts);
      for (uint64_t j = 0; j < slots; ++j) {
        const size_t x = static_cast<size_t>(slot_expert(live, rank.rank, param.module, j));
        if (!sources[k][x]) {
          sources[k][x] = std::move(by_slot[j]);
        } else if (*sources[k][x] != by_slot[j]) {
          throw inconsistent(param,
                             fmt::format("two copies of expert {} read different tensors", x));
        }
      }
    }
  }
  for (RankPlan& rank : next.ranks) {
    rank.read_bytes = 0;
    for (size_t k = 0; k < params; ++k) {
      PlanParam& param = rank.params[k];
      if (live.modules[param.module].moe_layer >= 0 && !param.pieces.empty() &&
          !live.format.every_expert_table(param.name)) {
        const uint64_t slot_bytes = param.nbytes / slots;
        std::vector<size_t> used(slots, 0);  // pieces of each slot seen so far
        for (PlanPiece& piece : param.pieces) {
          const uint64_t j = piece.dst_offset / slot_bytes;
          const size_t y = static_cast<size_t>(slot_expert(next, rank.rank, param.module, j));
          const std::optional<std::vector<uint32_t>>& ids = sources[k].at(y);
          if (!ids || used[j] >= ids->size()) {
            throw inconsistent(param, fmt::format("expert {} has no tensors to take", y));
          }
          piece.source = (*ids)[used[j]++];
          // A stacked source holds every expert: the expert is in the rows, moved from the one the
          // slot holds now to y.
          if (const uint64_t per = next.sources[piece.source].expert_rows; per > 0) {
            const uint64_t x = static_cast<uint64_t>(slot_expert(live, rank.rank, param.module, j));
            const uint64_t y_rows = static_cast<uint64_t>(y) * per;
            piece.row_begin = piece.row_begin - x * per + y_rows;
            piece.row_end = piece.row_end - x * per + y_rows;
          }
        }
        for (uint64_t j = 0; j < slots; ++j) {
          const size_t y = static_cast<size_t>(slot_expert(next, rank.rank, param.module, j));
          if (!sources[k][y] || used[j] != sources[k][y]->size()) {
            throw inconsistent(param, fmt::format("slot {} has another number of pieces", j));
          }
        }
      }
      for (const PlanPiece& piece : param.pieces) {
        rank.read_bytes +=
            piece.rows() * piece.cols() * dtype_bits(next.sources[piece.source].dtype) / 8;
      }
    }
  }
  return next;
}

}  // namespace shardload::reload
