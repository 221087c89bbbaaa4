// Applies a new expert placement in place (EPLB): only slots whose expert changed are rewritten,
// from a slot of the same rank that already holds the expert when there is one, else from the
// checkpoint.
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <map>

#include "core/parallel_for.h"
#include "core/seconds_since.h"
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

// What fills slot j of an expert parameter, independent of j: the source tensors and their blocks,
// with destinations relative to the slot. Two slots holding the same expert have the same
// signature.
std::string slot_signature(const Plan& plan, const PlanParam& param, uint64_t slots,
                           uint64_t slot) {
  const uint64_t slot_bytes = param.nbytes / slots;
  std::string out;
  for (const PlanPiece& piece : param.pieces) {
    if (piece.dst_offset / slot_bytes != slot) continue;
    out += fmt::format("{}:{}-{}:{}-{}@{}/{};", plan.sources[piece.source].name, piece.row_begin,
                       piece.row_end, piece.col_begin, piece.col_end,
                       piece.dst_offset - slot * slot_bytes, piece.divisor);
  }
  return out;
}

bool same_pieces(const Plan& a, const PlanParam& p, const Plan& b, const PlanParam& q) {
  if (p.pieces.size() != q.pieces.size()) return false;
  for (size_t i = 0; i < p.pieces.size(); ++i) {
    const PlanPiece& x = p.pieces[i];
    const PlanPiece& y = q.pieces[i];
    if (a.sources[x.source].name != b.sources[y.source].name || x.row_begin != y.row_begin ||
        x.row_end != y.row_end || x.col_begin != y.col_begin || x.col_end != y.col_end ||
        x.dst_offset != y.dst_offset || x.divisor != y.divisor) {
      return false;
    }
  }
  return true;
}

// One (rank, module) whose placement changed: per slot, -1 (unchanged), -2 (read from the
// checkpoint) or the old slot of the same rank to copy from.
struct Move {
  size_t rank_index;
  uint32_t module;
  std::vector<int> source_slot;
};

constexpr int kUnchanged = -1;
constexpr int kRead = -2;

}  // namespace
}  // namespace reload

UpdateResult rebalance_experts(LiveModel& live,
                               const std::vector<std::vector<int>>& physical_to_logical,
                               const UpdateOptions& options) {
  using namespace reload;
  const auto start = std::chrono::steady_clock::now();
  check_map(live.plan, physical_to_logical);
  const Checkpoint checkpoint = Checkpoint::open(live.model_path);
  ParallelConfig parallel = live.plan.parallel;
  parallel.expert_map = physical_to_logical;
  Plan plan = plan_update(checkpoint, live, parallel);
  const uint64_t slots = static_cast<uint64_t>(plan.physical_experts / plan.parallel.ep);

  std::vector<Move> moves;
  std::vector<Unit> units;
  for (size_t i = 0; i < live.ranks.size(); ++i) {
    const size_t r = static_cast<size_t>(live.ranks[i].rank);
    const RankPlan& old_rank = live.plan.ranks[r];
    const RankPlan& new_rank = plan.ranks[r];
    // Modules whose pieces changed, and their per-slot signatures (old and new), over all their
    // params.
    std::map<uint32_t, std::pair<std::vector<std::string>, std::vector<std::string>>> changed;
    for (size_t k = 0; k < new_rank.params.size(); ++k) {
      if (!same_pieces(live.plan, old_rank.params[k], plan, new_rank.params[k]))
        changed[new_rank.params[k].module];
    }
    for (auto& [module, signatures] : changed) {
      auto& [old_sig, new_sig] = signatures;
      old_sig.assign(slots, "");
      new_sig.assign(slots, "");
      for (size_t k = 0; k < new_rank.params.size(); ++k) {
        const PlanParam& param = new_rank.params[k];
        if (param.module != module) continue;
        if (param.nbytes % slots != 0 || (!param.shape.empty() && param.shape[0] != slots)) {
          throw Error(ErrorKind::kInvalidArgument,
                      "a rebalanced tensor has no expert slot dimension",
                      {.tensor = param.name,
                       .expected = fmt::format("{} slots", slots),
                       .found = fmt::format("{} bytes", param.nbytes)});
        }
        for (uint64_t j = 0; j < slots; ++j) {
          old_sig[j] += slot_signature(live.plan, old_rank.params[k], slots, j) + "|";
          new_sig[j] += slot_signature(plan, param, slots, j) + "|";
        }
      }
      Move move{i, module, std::vector<int>(slots, kUnchanged)};
      Unit unit{.rank_index = i, .module = module, .ranges = {}, .bytes = 0, .tensors = 0};
      bool any = false;
      for (uint64_t j = 0; j < slots; ++j) {
        if (new_sig[j] == old_sig[j]) continue;
        any = true;
        move.source_slot[j] = kRead;
        for (uint64_t k = 0; k < slots; ++k) {
          if (old_sig[k] == new_sig[j]) {
            move.source_slot[j] = static_cast<int>(k);
            break;
          }
        }
      }
      if (!any) continue;
      for (const PlanParam& param : new_rank.params) {
        if (param.module != module) continue;
        if (param.exported()) ++unit.tensors;
        if (param.role == ParamRole::kInputScale || param.role == ParamRole::kInputScaleParts) {
          add_range(unit, param.offset,
                    param.nbytes);  // merged over the rank's experts: recomputed whole
          continue;
        }
        const uint64_t slot_bytes = param.nbytes / slots;
        for (uint64_t j = 0; j < slots; ++j) {
          if (move.source_slot[j] != kUnchanged)
            add_range(unit, param.offset + j * slot_bytes, slot_bytes);
        }
      }
      moves.push_back(std::move(move));
      units.push_back(std::move(unit));
    }
  }

  uint64_t local_bytes = 0;
  const StageGroup stage = [&](Staging& staging, const std::vector<size_t>& group) {
    // Local copies first (from live slots, which this group has not changed yet), and the whole
    // per-part input-scale table, whose unchanged rows the recomputed maximum needs.
    std::vector<std::map<uint32_t, const Move*>> reads(live.ranks.size());
    for (size_t u : group) {
      const Move& move = moves[u];
      const RankPlan& rank = plan.ranks[static_cast<size_t>(live.ranks[move.rank_index].rank)];
      const std::byte* from = live.ranks[move.rank_index].buffer.data();
      std::byte* to = staging.ranks()[move.rank_index].buffer.data();
      for (const PlanParam& param : rank.params) {
        if (param.module != move.module) continue;
        if (param.role == ParamRole::kInputScaleParts)
          std::memcpy(to + param.offset, from + param.offset, param.nbytes);
        if (param.role == ParamRole::kInputScale) continue;
        const uint64_t slot_bytes = param.nbytes / slots;
        for (uint64_t j = 0; j < slots; ++j) {
          const int k = move.source_slot[j];
          if (k < 0) continue;
          std::memcpy(to + param.offset + j * slot_bytes,
                      from + param.offset + static_cast<uint64_t>(k) * slot_bytes, slot_bytes);
          local_bytes += slot_bytes;
        }
      }
      reads[move.rank_index][move.module] = &move;
    }
    const uint64_t read = read_pieces(
        checkpoint, plan, staging.ranks(),
        [&](int rank, const PlanParam& param, const PlanPiece& piece) {
          const auto& modules = reads[staging.index_of(rank)];
          const auto it = modules.find(param.module);
          if (it == modules.end()) return false;
          const uint64_t slot = piece.dst_offset / (param.nbytes / slots);
          return it->second->source_slot[slot] == kRead;
        },
        options.threads, options.cancel);
    // Post-processing of the slots read (a copied slot is already processed), and the merged input
    // scale.
    parallel_for(group.size(), options.threads, [&](size_t g, int) {
      const Move& move = moves[group[g]];
      std::vector<bool> read_slots(slots, false);
      for (uint64_t j = 0; j < slots; ++j) read_slots[j] = move.source_slot[j] == kRead;
      postprocess_slots(plan, staging.ranks()[move.rank_index], move.module, read_slots);
    });
    return read;
  };
  UpdateResult result = run_update(live, checkpoint, plan, units, stage, options);
  result.local_bytes = local_bytes;
  live.plan = std::move(plan);  // its parallel config carries the new map
  result.seconds_stage = std::max(
      0.0, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() -
               result.seconds_commit);
  return result;
}

}  // namespace shardload
