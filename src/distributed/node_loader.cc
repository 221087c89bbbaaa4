// One node's part of a distributed load: its block of ranks, filled by the striped pipeline
// (distributed/striped_load.h) or by the single-node loader (--read local), agreed on by every
// node.
#include <fmt/format.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "core/fault_injection.h"
#include "core/seconds_since.h"
#include "distributed/striped_load.h"
#include "shardload/distributed.h"
#include "shardload/error.h"

namespace shardload {
namespace {

std::vector<RankWeights> allocate(const Plan& plan, NodeRanks ranks) {
  std::vector<int> held;
  for (int r = ranks.first; r < ranks.last; ++r) held.push_back(r);
  return allocate_ranks(plan, held);
}

void load_local(const Checkpoint& ckpt, const Plan& plan, const LoadOptions& options,
                std::vector<RankWeights>& ranks, NodeLoadStats& stats) {
  LoadStats local;
  load_into(ckpt, plan, ranks, {}, options, &local);
  stats.io = local.io;
  stats.bytes_read = local.bytes_read;
  stats.seconds_read = local.seconds_copy;
  stats.seconds_write = local.seconds_copy;
  stats.seconds_postprocess = local.seconds_postprocess;
}

}  // namespace

void load_node_into(const Checkpoint& ckpt, const Plan& plan, const ReadAssignment& reads,
                    Transport& transport, std::vector<RankWeights>& ranks,
                    const LoadOptions& options, NodeLoadStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  NodeLoadStats node_stats;
  node_stats.node = transport.node();
  node_stats.policy = reads.policy;
  run_on_every_node(transport, [&] {
    fault::at("node_load");  // a node that hangs before it sends anything
    if (reads.nodes != transport.nodes()) {
      throw Error(
          ErrorKind::kInvalidArgument, "the read assignment is for another node count",
          {.expected = std::to_string(transport.nodes()), .found = std::to_string(reads.nodes)});
    }
    node_stats.ranks =
        node_ranks(static_cast<int>(plan.ranks.size()), transport.nodes(), transport.node());
    if (ranks.size() != static_cast<size_t>(node_stats.ranks.last - node_stats.ranks.first)) {
      throw Error(ErrorKind::kInternal, "the buffers are not this node's ranks",
                  {.expected = std::to_string(node_stats.ranks.last - node_stats.ranks.first),
                   .found = std::to_string(ranks.size())});
    }
    if (reads.policy == ReadPolicy::kLocal) {
      load_local(ckpt, plan, options, ranks, node_stats);
    } else {
      distributed::load_striped(ckpt, plan, reads, transport, options, ranks, node_stats);
    }
  });
  for (const RankWeights& weights : ranks) node_stats.bytes_written += weights.buffer.size();
  node_stats.seconds = seconds_since(start);
  if (stats != nullptr) *stats = node_stats;
}

std::vector<RankWeights> load_node(const Checkpoint& ckpt, const Plan& plan,
                                   const ReadAssignment& reads, Transport& transport,
                                   const LoadOptions& options, NodeLoadStats* stats) {
  std::vector<RankWeights> ranks;
  run_on_every_node(transport, [&] {
    ranks = allocate(plan, node_ranks(static_cast<int>(plan.ranks.size()), transport.nodes(),
                                      transport.node()));
  });
  load_node_into(ckpt, plan, reads, transport, ranks, options, stats);
  return ranks;
}

nlohmann::json NodeLoadStats::to_json() const {
  const auto rate = [](uint64_t bytes, double seconds) {
    return seconds > 0 ? bytes / seconds / 1e9 : 0.0;
  };
  return {{"node", node},
          {"ranks", {ranks.first, ranks.last - 1}},
          {"read", read_policy_name(policy)},
          {"io", io_mode_name(io)},
          {"bytes_read", bytes_read},
          {"bytes_sent", bytes_sent},
          {"bytes_received", bytes_received},
          {"bytes_written", bytes_written},
          {"seconds", seconds},
          {"seconds_postprocess", seconds_postprocess},
          {"read_gbps", rate(bytes_read, seconds_read)},
          {"send_gbps", rate(bytes_sent, seconds_send)},
          {"receive_gbps", rate(bytes_received, seconds_receive)},
          {"write_gbps", rate(bytes_written, seconds_write)}};
}

}  // namespace shardload
