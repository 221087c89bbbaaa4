#pragma once

#include <stdexcept>

namespace shardload {

// Thrown by a node's step that stopped because a peer told it it failed: run_on_every_node then
// reports the peer's own error, not this.
struct PeerFailed : std::runtime_error {
  PeerFailed() : std::runtime_error("a peer node failed") {}
};

}  // namespace shardload
