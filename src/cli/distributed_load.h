#pragma once

#include <string>

#include "shardload/distributed.h"
#include "shardload/loader.h"
#include "shardload/plan.h"

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

// Loads this process's node of the layout; node 0 prints every node's checksums (in rank order, the
// text a single-process load prints) and summary. Errors are the same on every node.
void run_distributed_load(const DistributedLoadRequest& request);

}  // namespace shardload::cli
