#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "shardload/loader.h"
#include "shardload/plan.h"
#include "shardload/transport.h"

namespace shardload {

// Who reads the checkpoint when several nodes load one layout (docs/distributed.md).
enum class ReadPolicy {
  kStriped,  // every needed byte read by exactly one node, balanced, and sent to the nodes that
             // hold it
  kLocal,    // each node reads what its own ranks need (node-local copies of the checkpoint)
};
inline constexpr std::pair<ReadPolicy, const char*> kReadPolicyNames[] = {
    {ReadPolicy::kStriped, "striped"}, {ReadPolicy::kLocal, "local"}};
std::string_view read_policy_name(ReadPolicy policy);
std::optional<ReadPolicy> read_policy_from_name(std::string_view name);

// Node n of N holds the contiguous ranks [first, last): n*T/N ... (n+1)*T/N - 1.
struct NodeRanks {
  int first = 0;
  int last = 0;
};
// Throws Error(kInvalidArgument) unless 1 <= N <= kMaxNodes, N divides T and 0 <= n < N.
NodeRanks node_ranks(int ranks, int nodes, int node);
inline constexpr int kMaxNodes = 64;  // a node set is one 64-bit word

// A contiguous checkpoint byte range that moves as one: the same nodes need every byte of it, and
// it starts and ends on row boundaries of the tensors it covers.
struct ReadChunk {
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t nodes = 0;   // bit n: node n needs these bytes
  int reader = 0;       // the node that reads them from storage (striped)
  uint32_t source = 0;  // the plan source the chunk starts in (named in errors)

  bool needed_by(int node) const { return (nodes >> node) & 1; }
};

// What one node does in a distributed load, in bytes.
struct NodeTraffic {
  NodeRanks ranks;
  uint64_t needed = 0;    // distinct checkpoint bytes its ranks take
  uint64_t read = 0;      // read from storage
  uint64_t sent = 0;      // sent to other nodes (a byte sent to two nodes counts twice)
  uint64_t received = 0;  // received from other nodes
};

// Who reads what, decided from the plan alone, so that `plan --nodes` and the loader agree.
struct ReadAssignment {
  int nodes = 1;
  ReadPolicy policy = ReadPolicy::kStriped;
  uint64_t chunk_bytes = 0;  // the largest chunk the split aims for (a single row may exceed it)
  std::vector<ReadChunk> chunks;  // every needed byte once, in (file, offset) order
  std::vector<NodeTraffic> per_node;

  uint64_t needed_bytes() const;  // distinct bytes any node needs: what striped reads, summed
  // Per file (indexed like Checkpoint::files()): the chunk starts, sorted (Executor::set_cuts).
  std::vector<std::vector<uint64_t>> cuts(size_t files) const;
  nlohmann::json to_json() const;
};

// Splits the bytes the plan's ranks read into chunks by the set of nodes that need them and, for
// kStriped, gives each chunk one reader: the least-loaded node among those that need it while that
// keeps it within 5% of the mean, else the least-loaded node (every node reads at most the mean
// plus a few percent and one chunk). Chunks aim at 1/128 of a node's share, 4 KiB to 16 MiB.
ReadAssignment assign_reads(const Plan& plan, int nodes, ReadPolicy policy);

// Runs `step` on every node and agrees on how it went: when it threw on any node, every node throws
// the error of the lowest such node (its kind and details, the message prefixed "node N of M: ").
// Collective: every node calls it, in the same order.
void run_on_every_node(Transport& transport, const std::function<void()>& step);

// Throws Error(kConflict) on every node unless every node planned the same layout of the same
// checkpoint tensors (a node that sees other files under the same path). Collective.
void check_same_plan(Transport& transport, const Plan& plan);

// What one node did in a distributed load. Seconds are the wall time during which the stage had
// work in flight; the stages overlap.
struct NodeLoadStats {
  int node = 0;
  NodeRanks ranks;
  ReadPolicy policy = ReadPolicy::kStriped;
  IoMode io = IoMode::kPread;
  uint64_t bytes_read = 0;      // from storage
  uint64_t bytes_sent = 0;      // to other nodes
  uint64_t bytes_received = 0;  // from other nodes
  uint64_t bytes_written = 0;   // rank bytes filled (including zero padding)
  double seconds_read = 0;
  double seconds_send = 0;
  double seconds_receive = 0;
  double seconds_write = 0;
  double seconds_postprocess = 0;
  double seconds = 0;  // the whole load of this node

  nlohmann::json to_json() const;
};

// Loads this node's ranks (node transport.node() of transport.nodes(), its block of the plan's
// ranks) under `reads` (assign_reads of the same plan, on every node): kLocal runs the single-node
// loader on them; kStriped reads the chunks this node is the reader of into transfer buffers, sends
// each to the other nodes that need it and fills its ranks from its own reads and what it receives,
// the three overlapping, with at most 24 transfer buffers of chunk size
// (ReadAssignment::chunk_bytes, at most 16 MiB unless one row is larger) in flight: clamp(threads,
// 2, 8) for reads and clamp(2 x threads, 4, 16) for receives. Collective; an error on any node is
// the same Error on every node (run_on_every_node), and no node waits on a peer that failed.
std::vector<RankWeights> load_node(const Checkpoint& checkpoint, const Plan& plan,
                                   const ReadAssignment& reads, Transport& transport,
                                   const LoadOptions& options = {}, NodeLoadStats* stats = nullptr);

// load_node into buffers the caller allocated: this node's ranks, in rank order, e.g. mappings of
// shared memory (the weight server). The loader writes every tensor byte and leaves padding as it
// finds it. Collective, with the same agreement as load_node.
void load_node_into(const Checkpoint& checkpoint, const Plan& plan, const ReadAssignment& reads,
                    Transport& transport, std::vector<RankWeights>& ranks,
                    const LoadOptions& options = {}, NodeLoadStats* stats = nullptr);

}  // namespace shardload
