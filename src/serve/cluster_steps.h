#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "reload/staging.h"
#include "serve/shm_store.h"

namespace shardload::serve {

struct CommitResult {
  uint64_t changed_bytes = 0;
  double seconds = 0;   // the pause readers of this node saw
  std::string warning;  // this node's ShmStore::publish_change warning; empty: none
};

// The second half of a change on several nodes, once every node staged (the staging step's
// agreement), under ShmStore's commit protocol on every node: every node begins (a node that
// cannot stops every node before any byte changes: nothing changed anywhere), every node commits
// its units between its sequence words, then every node advances its version by one, runs
// `committed` (the new plan of a rebalance, the update's sources) and publishes. A commit that
// failed on some node is run again on every node from the same staging (a commit only copies
// staged bytes, so running it twice gives the same bytes): the nodes end consistent, at one new
// version. Only when that fails too does every node publish the state it holds, recorded as
// incomplete (committed(false)) so that a restart reloads, and the error says so.
CommitResult commit_on_every_node(ShmStore& store, reload::Staging& staging,
                                  const std::vector<reload::Unit>& units,
                                  const std::function<void(bool complete)>& committed);

}  // namespace shardload::serve
