#pragma once

#include <optional>
#include <string>

#include "shardload/distributed.h"
#include "shardload/loader.h"
#include "shardload/plan.h"
#include "shardload/transport.h"

namespace shardload::cli {

// `shardload load` started by an MPI launcher: one node per process (docs/distributed.md).
struct DistributedLoadRequest {
  std::string model;
  ParallelConfig parallel;
  ReadPolicy read = ReadPolicy::kStriped;
  LoadOptions load;
  bool checksum = false;
  bool json = false;
};

// The checkpoint and its plan, opened on every node (each node's error the same on all: a
// layout that does not fit the model, or whose ranks the node count does not divide, is a usage
// error), checked to be the same plan everywhere.
struct NodeModel {
  std::optional<Checkpoint> checkpoint;
  std::optional<Plan> plan;
};
NodeModel open_on_every_node(Transport& transport, const std::string& model,
                             const ParallelConfig& parallel);

// Loads this process's node of the layout; node 0 prints every node's checksums (in rank order, the
// text a single-process load prints) and summary. Errors are the same on every node.
void run_distributed_load(const DistributedLoadRequest& request);

}  // namespace shardload::cli
