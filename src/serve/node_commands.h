#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <vector>

#include "serve/shm_store.h"

namespace shardload::serve {

// The control channel of a server on several nodes: node 0 (which serves HTTP) sends each command
// to the other nodes and runs it with them; the others follow. A command is JSON:
//   {"op": "update", "body": <the HTTP body>, "model_path": <absolute>}
//   {"op": "rebalance", "map": [[...], ...]}
//   {"op": "checksum"} | {"op": "state"} | {"op": "stop"}
// Idle followers wait on a small wake-up message, polled with a growing sleep (up to 20 ms), so
// that an idle server costs no CPU; the command itself travels by all_gather.
class NodeCommands {
 public:
  explicit NodeCommands(ShmStore& store);

  // Node 0: runs `command` on every node; every node's answer, in node order. When the command
  // failed, throws the Error every node agreed on (its message names the node).
  std::vector<nlohmann::json> run(const nlohmann::json& command);
  // The other nodes: runs node 0's commands until it sends "stop". Throws the stall error once a
  // node stalled (shardload/transport.h): no command can run after that.
  void follow();

 private:
  nlohmann::json execute(const nlohmann::json& command);
  std::vector<nlohmann::json> gather(const nlohmann::json& mine);

  ShmStore& store_;
  Transport& transport_;
  std::array<std::byte, 8> wake_{};
};

}  // namespace shardload::serve
