// In-place, atomic weight updates from a checkpoint (RL weight sync, a fine-tuned checkpoint,
// recovery).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "core/parallel_for.h"
#include "core/seconds_since.h"
#include "reload/staging.h"
#include "reload/update_steps.h"
#include "shardload/error.h"

namespace shardload {
namespace reload {

Plan plan_update(const Checkpoint& checkpoint, const LiveModel& live,
                 const ParallelConfig& parallel) {
  ParallelConfig pinned = parallel;
  pinned.dtype =
      live.plan.dtype;  // values are converted to the live dtype, as the engines' weight loaders do
  Plan plan = make_plan(checkpoint, pinned);
  check_same_layout(live.plan, plan, checkpoint.path());
  return plan;
}

namespace {

// run_update with double buffering: one pass over the changed bytes, into the spare, then a swap.
UpdateResult run_double_buffered(LiveModel& live, const Checkpoint* checkpoint, const std::vector<Unit>& units,
                                 const StageGroup& stage, const UpdateOptions& options) {
  for (size_t i = 0; i < live.ranks.size(); ++i) {
    if (live.spare.buffers.size() != live.ranks.size() ||
        live.spare.buffers[i].size() != live.ranks[i].buffer.size()) {
      throw Error(ErrorKind::kInternal, "the spare buffers do not match the live ranks",
                  {.field = fmt::format("rank {}", live.ranks[i].rank),
                   .expected = fmt::format("{} bytes", live.ranks[i].buffer.size()),
                   .found = i < live.spare.buffers.size() ? fmt::format("{} bytes", live.spare.buffers[i].size())
                                                          : "none"});
    }
  }
  UpdateResult result;
  std::optional<FileWatch> watch;
  if (checkpoint != nullptr) watch.emplace(*checkpoint);
  result.synced_bytes = sync_spare(live, units, options.threads);
  Staging staging(live);  // the spare, whole but for the units' ranges
  std::vector<size_t> all(units.size());
  for (size_t u = 0; u < units.size(); ++u) all[u] = u;
  try {
    result.read_bytes = stage(staging, all);
    if (watch) watch->check();
    if (options.cancel != nullptr && options.cancel->load()) {
      throw Error(ErrorKind::kCancelled, "the update was cancelled before its commit");
    }
  } catch (...) {
    staging.return_spare(live);
    mark_stale(live, units, /*failed=*/true);
    throw;
  }
  double pause = 0;
  try {
    pause = swap_commit(live, staging, options);
  } catch (...) {
    // A hook failed around the swap (a GPU copy): the buffers did change places.
    staging.return_spare(live);
    mark_stale(live, units, /*failed=*/false);
    ++live.version;
    throw;
  }
  staging.return_spare(live);
  mark_stale(live, units, /*failed=*/false);
  result.seconds_commit = pause;
  result.max_pause_seconds = pause;
  for (const Unit& unit : units) {
    result.changed_bytes += unit.bytes;
    result.updated_tensors += unit.tensors;
    ++result.modules;
  }
  result.groups = 1;
  result.version = ++live.version;
  return result;
}

}  // namespace

UpdateResult run_update(LiveModel& live, const Checkpoint* checkpoint, const Plan& plan,
                        const std::vector<Unit>& units, const StageGroup& stage,
                        const UpdateOptions& options, const std::vector<size_t>& together) {
  if (live.spare.active()) return run_double_buffered(live, checkpoint, units, stage, options);
  UpdateResult result;
  const auto groups = group_units(units, options.staging_bytes, plan, live.ranks, together);
  std::optional<FileWatch> watch;
  if (checkpoint != nullptr) watch.emplace(*checkpoint);
  const bool keep = options.keep_staging && options.staging_bytes == 0;
  if (!keep) live.kept_staging.clear();
  Staging staging(live);
  size_t committed = 0;
  try {
    for (const std::vector<size_t>& group : groups) {
      result.read_bytes += stage(staging, group);
      if (watch) watch->check();  // a file changed under the reader: its bytes may be a mix
      if (options.cancel != nullptr && options.cancel->load()) {
        throw Error(ErrorKind::kCancelled, "the update was cancelled before its commit");
      }
      double pause = 0;
      try {
        pause = commit_group(live, staging, units, group, options);
      } catch (...) {
        ++committed;  // a hook failed around the copies (a GPU copy): the bytes did change
        throw;
      }
      ++committed;
      result.seconds_commit += pause;
      result.max_pause_seconds = std::max(result.max_pause_seconds, pause);
      for (size_t u : group) {
        result.changed_bytes += units[u].bytes;
        result.updated_tensors += units[u].tensors;
        ++result.modules;
      }
      if (groups.size() > 1) staging.release(units, group);
    }
  } catch (const Error& e) {
    if (keep) staging.keep(live);
    if (committed == 0) throw;
    ++live.version;  // bytes did change: readers comparing versions must see it
    throw Error(
        e.kind(),
        fmt::format(
            "{} (after {} of {} commit groups: those groups hold the new weights, the rest the "
            "old; version is now {})",
            e.message(), committed, groups.size(), live.version),
        e.details());
  }
  if (keep) staging.keep(live);
  result.groups = groups.size();
  result.version = ++live.version;
  return result;
}

}  // namespace reload

LiveModel load_live(const std::string& model_path, const ParallelConfig& parallel,
                    const LoadOptions& options) {
  const Checkpoint checkpoint = Checkpoint::open(model_path);
  LiveModel live;
  live.model_path = model_path;
  live.plan = make_plan(checkpoint, parallel);
  LoadOptions all = options;
  all.ranks.clear();
  live.ranks = load_ranks(checkpoint, live.plan, all);
  return live;
}

UpdateResult update_weights(LiveModel& live, const std::string& model_path,
                            const WeightFilter& filter, const UpdateOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const Checkpoint checkpoint = Checkpoint::open(model_path);
  const Plan plan = reload::plan_update(checkpoint, live, live.plan.parallel);
  const reload::SourceSelection selection = reload::select_sources(plan, filter, model_path);
  const std::vector<reload::Unit> units = reload::units_for(live, plan, selection);
  const reload::StageGroup stage = [&](reload::Staging& staging, const std::vector<size_t>& group) {
    // The unit of the group for each (rank, module), if any.
    std::vector<std::vector<const reload::Unit*>> wanted(
        live.ranks.size(), std::vector<const reload::Unit*>(plan.modules.size(), nullptr));
    for (size_t u : group) wanted[units[u].rank_index][units[u].module] = &units[u];
    const uint64_t read = read_pieces(
        checkpoint, plan, staging.ranks(),
        [&](int rank, const PlanParam& param, const PlanPiece& piece) {
          const reload::Unit* unit = wanted[staging.index_of(rank)][param.module];
          return unit != nullptr && reload::unit_reads(plan, *unit, param, piece);
        },
        options.threads, options.cancel);
    // Post-processing runs in staging, so that a bad scale fails before any live byte changes.
    parallel_for(group.size(), options.threads, [&](size_t g, int) {
      const reload::Unit& unit = units[group[g]];
      reload::postprocess_unit(plan, unit, live.ranks[unit.rank_index].buffer.data(),
                               staging.ranks()[unit.rank_index], &checkpoint);
    });
    return read;
  };
  UpdateResult result = reload::run_update(live, &checkpoint, plan, units, stage, options);
  live.model_path = model_path;
  result.source = checkpoint.identity();
  result.seconds_stage = std::max(0.0, seconds_since(start) - result.seconds_commit);
  return result;
}

}  // namespace shardload
