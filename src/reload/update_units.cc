// What an update rewrites and reads: the filter's selection of checkpoint tensors, turned into
// (rank, module) units. A tensor selected by name reloads its module whole; one selected by its
// expert alone rewrites only the slots of that expert (every replica), so that an expert filter
// reads and changes nothing of the rank's other experts.
#include <algorithm>
#include <cstring>

#include "load/postprocess_ranks.h"
#include "reload/filter.h"
#include "reload/rebalance_plan.h"
#include "reload/update_steps.h"
#include "shardload/error.h"

namespace shardload::reload {
namespace {

enum class Touch : uint8_t { kNone, kSlots, kWhole };

// A parameter with one row per expert slot, which a slot unit rewrites row by row. The merged input
// scale ([slots] too) holds the rank's maximum in every row: it is recomputed, never a slot's own.
bool has_slot_rows(const PlanParam& param, uint64_t slots) {
  return slots > 0 && !param.shape.empty() && param.shape[0] == slots && param.nbytes % slots == 0;
}

uint64_t slot_of(const PlanParam& param, const PlanPiece& piece, uint64_t slots) {
  return piece.dst_offset / (param.nbytes / slots);
}

// What an update rewrites of each module of one rank.
struct RankTouch {
  std::vector<Touch> modules;
  std::vector<std::vector<uint64_t>> slots;  // of each kSlots module, ascending
};

RankTouch touch_rank(const Plan& plan, const RankPlan& rank, const SourceSelection& selection) {
  const uint64_t slots = plan.physical_experts > 0 ? local_slots(plan) : 0;
  const size_t modules = plan.modules.size();
  std::vector<bool> whole(modules, false);
  std::vector<bool> slotless(modules, false);  // a routed module with a param not cut by slot
  RankTouch out{.modules = std::vector<Touch>(modules, Touch::kNone),
                .slots = std::vector<std::vector<uint64_t>>(modules)};
  for (const PlanParam& param : rank.params) {
    const bool routed = plan.modules[param.module].moe_layer >= 0;
    const bool rows = has_slot_rows(param, slots);
    const bool merged_input = param.role == ParamRole::kInputScale && plan.format.merges_input_scale();
    if (routed && !rows && !merged_input) slotless[param.module] = true;
    for (const PlanPiece& piece : param.pieces) {
      if (!selection.selected[piece.source]) continue;
      if (routed && rows && selection.expert_only[piece.source]) {
        out.slots[param.module].push_back(slot_of(param, piece, slots));
      } else {
        whole[param.module] = true;
      }
    }
  }
  for (size_t m = 0; m < modules; ++m) {
    std::vector<uint64_t>& chosen = out.slots[m];
    std::sort(chosen.begin(), chosen.end());
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
    if (whole[m] || (slotless[m] && !chosen.empty())) {
      out.modules[m] = Touch::kWhole;
      chosen.clear();
    } else if (!chosen.empty()) {
      out.modules[m] = Touch::kSlots;
    }
  }
  return out;
}

bool reads(const Plan& plan, Touch touch, const std::vector<uint64_t>& slots,
           const PlanParam& param, const PlanPiece& piece) {
  if (touch == Touch::kWhole) return true;
  if (touch == Touch::kNone) return false;
  return std::binary_search(slots.begin(), slots.end(), slot_of(param, piece, local_slots(plan)));
}

}  // namespace

SourceSelection select_sources(const Plan& plan, const WeightFilter& filter,
                               const std::string& model_path) {
  const CompiledFilter compiled(filter);
  SourceSelection out{.selected = std::vector<bool>(plan.sources.size(), false),
                      .expert_only = std::vector<bool>(plan.sources.size(), false)};
  bool any = false;
  for (size_t s = 0; s < plan.sources.size(); ++s) {
    const CompiledFilter::Match match = compiled.match(plan.sources[s].name);
    out.selected[s] = match != CompiledFilter::Match::kNone;
    out.expert_only[s] = match == CompiledFilter::Match::kExpert;
    any = any || out.selected[s];
  }
  if (!any) {
    throw Error(ErrorKind::kTensorNotFound,
                "the filter selects no tensor of the checkpoint; nothing was changed",
                {.file = model_path});
  }
  return out;
}

std::vector<Unit> units_for(const LiveModel& live, const Plan& plan,
                            const SourceSelection& selection) {
  std::vector<Unit> units;
  for (size_t i = 0; i < live.ranks.size(); ++i) {
    const RankPlan& rank = plan.ranks[static_cast<size_t>(live.ranks[i].rank)];
    const RankTouch touch = touch_rank(plan, rank, selection);
    for (const PlanParam& param : rank.params) {
      const Touch how = touch.modules[param.module];
      if (how == Touch::kNone) continue;
      if (units.empty() || units.back().rank_index != i || units.back().module != param.module) {
        units.push_back({.rank_index = i,
                         .module = param.module,
                         .ranges = {},
                         .bytes = 0,
                         .tensors = 0,
                         .slots = touch.slots[param.module]});
      }
      Unit& unit = units.back();
      if (param.exported()) ++unit.tensors;
      if (how == Touch::kWhole) {
        // Params of a module are consecutive in the rank; the alignment gap between them is zero
        // on both sides, so one range covers the module.
        const uint64_t begin = unit.ranges.empty() ? param.offset : unit.ranges.front().offset;
        unit.ranges.assign(1, {begin, param.offset + param.nbytes - begin});
        unit.bytes = unit.ranges.front().bytes;
      } else if (param.role == ParamRole::kInputScale && plan.format.merges_input_scale()) {
        add_range(unit, param.offset, param.nbytes);  // the rank's maximum, in every row
      } else {
        const uint64_t slot_bytes = param.nbytes / local_slots(plan);
        for (uint64_t j : unit.slots) add_range(unit, param.offset + j * slot_bytes, slot_bytes);
      }
    }
  }
  return units;
}

bool unit_reads(const Plan& plan, const Unit& unit, const PlanParam& param,
                const PlanPiece& piece) {
  return reads(plan, unit.slots.empty() ? Touch::kWhole : Touch::kSlots, unit.slots, param, piece);
}

Plan pieces_to_read(const Plan& plan, const SourceSelection& selection) {
  Plan out = plan;
  for (RankPlan& rank : out.ranks) {
    const RankTouch touch = touch_rank(plan, rank, selection);
    for (PlanParam& param : rank.params) {
      const Touch how = touch.modules[param.module];
      const std::vector<uint64_t>& slots = touch.slots[param.module];
      std::erase_if(param.pieces, [&](const PlanPiece& piece) {
        return !reads(plan, how, slots, param, piece);
      });
    }
  }
  return out;
}

void postprocess_unit(const Plan& plan, const Unit& unit, const std::byte* live,
                      RankWeights& staged, const Checkpoint* checkpoint) {
  if (unit.slots.empty()) {
    staged.processed[unit.module] = 0;
    postprocess_modules(plan, staged, {unit.module}, PostprocessMode::kOnce, checkpoint);
    return;
  }
  const RankPlan& rank = plan.ranks.at(static_cast<size_t>(staged.rank));
  const uint64_t slots = local_slots(plan);
  for (const PlanParam& param : rank.params) {
    if (param.module != unit.module || param.role != ParamRole::kInputScaleParts) continue;
    const uint64_t row = param.nbytes / slots;
    for (uint64_t j = 0; j < slots; ++j) {
      if (std::binary_search(unit.slots.begin(), unit.slots.end(), j)) continue;
      const uint64_t at = param.offset + j * row;
      std::memcpy(staged.buffer.data() + at, live + at, row);
    }
  }
  load::postprocess_expert_slots(plan, staged.rank, staged.buffer.data(), unit.module, unit.slots,
                                 checkpoint);
}

}  // namespace shardload::reload
