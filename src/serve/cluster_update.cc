// Updates on a server of several nodes: stage everywhere, agree, then commit everywhere.
#include <fmt/format.h>

#include <chrono>
#include <numeric>
#include <optional>

#include "core/fault_injection.h"
#include "core/parallel_for.h"
#include "core/seconds_since.h"
#include "distributed/striped_load.h"
#include "reload/update_steps.h"
#include "serve/cluster_ops.h"
#include "serve/cluster_steps.h"
#include "shardload/distributed.h"
#include "shardload/error.h"

namespace shardload::serve {
nlohmann::json cluster_update(ShmStore& store, const std::string& model_path,
                              const WeightFilter& filter) {
  const auto start = std::chrono::steady_clock::now();
  Transport& transport = *store.transport();
  LiveModel& live = store.live();
  const int threads = store.update_options().threads;
  std::optional<Checkpoint> checkpoint;
  Plan plan;
  Plan wanted;
  std::vector<reload::Unit> units;
  std::optional<ReadAssignment> reads;
  run_on_every_node(transport, [&] {
    fault::at("update_open");  // a node that cannot reach the checkpoint
    checkpoint.emplace(Checkpoint::open(model_path));
    plan = reload::plan_update(*checkpoint, live, live.plan.parallel);
    const reload::SourceSelection selection = reload::select_sources(plan, filter, model_path);
    units = reload::units_for(live, plan, selection);
    wanted = reload::pieces_to_read(plan, selection);
    reads = assign_reads(wanted, transport.nodes(), store.read_policy());
  });
  check_same_plan(transport, plan);

  std::optional<reload::Staging> staging;
  NodeLoadStats stats;
  try {
    run_on_every_node(transport, [&] {
      staging.emplace(live);
      const reload::FileWatch watch(*checkpoint);
      if (reads->policy == ReadPolicy::kLocal) {
        stats.bytes_read = read_pieces(*checkpoint, wanted, staging->ranks(), {}, threads);
      } else {
        LoadOptions options;
        options.threads = threads;
        distributed::fill_striped(*checkpoint, wanted, *reads, transport, options, staging->ranks(),
                                  stats);
      }
      fault::at("stage");
      // Post-processing runs in staging, so that a bad scale fails before any live byte changes.
      parallel_for(units.size(), threads, [&](size_t u, int) {
        const reload::Unit& unit = units[u];
        reload::postprocess_unit(plan, unit, live.ranks[unit.rank_index].buffer.data(),
                                 staging->ranks()[unit.rank_index], &*checkpoint);
      });
      watch.check();  // a file changed under the reader: its bytes may be a mix
      fault::at("agree");
    });
  } catch (...) {
    if (staging) staging->keep(live);
    throw;
  }
  const double seconds_stage = seconds_since(start);
  // The model path and sources are set before every node publishes, so that the manifests name the
  // checkpoint whose bytes they describe.
  const CommitResult commit = commit_on_every_node(store, *staging, units, [&](bool complete) {
    live.model_path = model_path;
    store.record_source(model_path, filter, complete, complete ? &checkpoint->identity() : nullptr);
  });
  if (staging) staging->keep(live);
  uint64_t tensors = 0;
  for (const reload::Unit& unit : units) tensors += unit.tensors;
  return {{"node", transport.node()},
          {"warning", commit.warning},
          {"version", live.version},
          {"updated_tensors", tensors},
          {"changed_bytes", commit.changed_bytes},
          {"bytes_read", stats.bytes_read},
          {"bytes_sent", stats.bytes_sent},
          {"bytes_received", stats.bytes_received},
          {"seconds_stage", seconds_stage},
          {"seconds_commit", commit.seconds}};
}

}  // namespace shardload::serve
