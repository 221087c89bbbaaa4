#pragma once

#include <span>
#include <vector>

// The two building blocks of EPLB, for one row (one layer, or one node of a layer). Float32
// throughout so that every comparison rounds as the reference's does.
namespace shardload::eplb {

struct Packing {
  std::vector<int> pack;  // [n] the pack of each item
  std::vector<int> rank;  // [n] its position within that pack
};

// Puts n weighted items into `packs` packs of exactly n / packs items each (packs must divide n),
// heaviest item first into the lightest pack that still has room.
Packing balanced_packing(std::span<const float> weights, int packs);

struct Replication {
  std::vector<int> physical_to_logical;  // [physical] the expert each replica copies
  std::vector<int> rank;   // [physical] the replica's rank among its expert's replicas
  std::vector<int> count;  // [logical] replicas per expert
};

// Gives each of the n experts one replica, then each extra replica to the expert whose per-replica
// load is largest. physical >= weights.size().
Replication replicate_experts(std::span<const float> weights, int physical);

}  // namespace shardload::eplb
