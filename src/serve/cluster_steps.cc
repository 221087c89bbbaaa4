#include "serve/cluster_steps.h"

#include <fmt/format.h>

#include <numeric>
#include <optional>

#include "core/fault_injection.h"
#include "serve/cluster_ops.h"
#include "shardload/distributed.h"
#include "shardload/error.h"

namespace shardload::serve {

CommitResult commit_on_every_node(ShmStore& store, reload::Staging& staging,
                                  const std::vector<reload::Unit>& units,
                                  const std::function<void(bool complete)>& committed) {
  Transport& transport = *store.transport();
  LiveModel& live = store.live();
  try {
    run_on_every_node(transport, [&] { store.begin_change(); });
  } catch (const Error&) {
    // The nodes that began set their flags: clear them, at the version they had.
    run_on_every_node(transport, [&] { store.publish_change(); });
    throw;
  }
  CommitResult result;
  for (const reload::Unit& unit : units) result.changed_bytes += unit.bytes;
  const auto commit = [&] {
    UpdateOptions options = store.update_options();
    const std::function<void()> begin = options.begin_commit;
    options.begin_commit = [&begin] {
      begin();
      fault::at("commit");  // a node killed, or failing, with its sequence words odd
    };
    std::vector<size_t> group(units.size());
    std::iota(group.begin(), group.end(), size_t{0});
    result.seconds = reload::commit_group(live, staging, units, group, options);
  };
  std::optional<Error> failed;
  try {
    run_on_every_node(transport, commit);
  } catch (const Error&) {
    try {
      run_on_every_node(transport, commit);
    } catch (const Error& again) {
      failed = again;
    }
  }
  ++live.version;
  committed(!failed);
  run_on_every_node(transport, [&] { result.warning = store.publish_change(); });
  if (failed) {
    throw Error(failed->kind(),
                fmt::format("{} (the commit failed twice: some nodes may hold the new weights; "
                            "every node publishes version {}, recorded as incomplete, so that a "
                            "restart reloads)",
                            failed->message(), live.version),
                failed->details());
  }
  return result;
}

}  // namespace shardload::serve
