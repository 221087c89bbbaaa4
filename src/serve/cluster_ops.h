#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/shm_store.h"
#include "shardload/reload.h"

namespace shardload::serve {

// The weight server's changes on several nodes: each runs on every node (collective, the same
// order everywhere) against that node's store and returns this node's part of the answer. Every
// step is agreed on (run_on_every_node): an error on any node is the same Error on every node,
// naming the node, and nothing changes on any node unless every node staged its new bytes.

// Update from a checkpoint: every node stages the new bytes of its ranks' selected modules
// (striped reads: each byte read once, by one node, sent to the nodes that need it), post-processes
// them in staging and checks that no file changed; once every node staged, every node commits, and
// the version advances by one on every node.
nlohmann::json cluster_update(ShmStore& store, const std::string& model_path,
                              const WeightFilter& filter);

// New expert map: slots are copied from live slots, within a node by memory copies and between
// nodes by transfers from a node that holds the expert live; nothing is read from storage.
nlohmann::json cluster_rebalance(ShmStore& store, const std::vector<std::vector<int>>& map);

// Per live rank its exported tensors' checksums: [{"rank", "tensors": {name: xxh3}}, ...] (what
// /weights_checksum lists).
nlohmann::json rank_checksums(const LiveModel& live);

// This node's per-tensor checksums: {"node", "version", "ranks": rank_checksums}.
nlohmann::json node_checksums(const ShmStore& store);

// This node's state: node, ranks, directory, version, model path.
nlohmann::json node_state(const ShmStore& store);

}  // namespace shardload::serve
