#include "serve/cluster_steps.h"

#include <fmt/format.h>

#include <numeric>

#include "core/fault_injection.h"
#include "serve/cluster_ops.h"
#include "shardload/distributed.h"
#include "shardload/error.h"

namespace shardload::serve {

CommitResult commit_on_every_node(ShmStore& store, reload::Staging& staging,
                                  const std::vector<reload::Unit>& units,
                                  const std::function<void()>& committed) {
  Transport& transport = *store.transport();
  LiveModel& live = store.live();
  CommitResult result;
  try {
    run_on_every_node(transport, [&] {
      store.write_manifest(true);
      UpdateOptions options = store.update_options();
      const std::function<void()> begin = options.begin_commit;
      options.begin_commit = [&begin] {
        begin();
        fault::at("commit");  // a node killed with its sequence words odd
      };
      std::vector<size_t> group(units.size());
      std::iota(group.begin(), group.end(), size_t{0});
      result.seconds = reload::commit_group(live, staging, units, group, options);
      for (const reload::Unit& unit : units) result.changed_bytes += unit.bytes;
    });
  } catch (const Error& e) {
    // Bytes may have changed on some node: readers comparing versions must see it.
    ++live.version;
    if (committed) committed();
    throw Error(
        e.kind(),
        fmt::format("{} (during the commit: some nodes may hold the new weights; every node "
                    "stays marked update_in_progress and a restart reloads; version is now "
                    "{})",
                    e.message(), live.version),
        e.details());
  }
  ++live.version;
  if (committed) committed();
  run_on_every_node(transport, [&] { store.write_manifest(false); });
  return result;
}

}  // namespace shardload::serve
