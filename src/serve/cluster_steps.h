#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "reload/staging.h"
#include "serve/shm_store.h"

namespace shardload::serve {

struct CommitResult {
  uint64_t changed_bytes = 0;
  double seconds = 0;  // the pause readers of this node saw
};

// The second half of a change on several nodes, once every node staged (the staging step's
// agreement): every node sets its update flags, commits its units between its sequence words and
// advances its version by one; then every node publishes. A failure during the commit on any node
// still advances every version (bytes may have changed somewhere) and leaves every node flagged
// update_in_progress, so that a restart reloads; the error says so.
// `committed` runs on every node after its commit, before it publishes (a rebalance's new plan, so
// that the manifest shows the new map).
CommitResult commit_on_every_node(ShmStore& store, reload::Staging& staging,
                                  const std::vector<reload::Unit>& units,
                                  const std::function<void()>& committed = {});

}  // namespace shardload::serve
