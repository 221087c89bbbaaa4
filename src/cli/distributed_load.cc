#include "cli/distributed_load.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/checkpoint_warnings.h"
#include "cli/checksum_lines.h"
#include "cli/parallel_options.h"
#include "cli/process_transport.h"
#include "cli/usage_error.h"
#include "core/plural.h"
#include "core/seconds_since.h"

namespace shardload::cli {
namespace {

std::string gbps(double rate) { return fmt::format("{:.2f} GB/s", rate); }

void print_summary(const Plan& plan, const ReadAssignment& reads,
                   const std::vector<std::string>& nodes, double seconds, bool json) {
  nlohmann::json all = {{"nodes", reads.nodes},       {"read", read_policy_name(reads.policy)},
                        {"ranks", plan.ranks.size()}, {"bytes_needed", reads.needed_bytes()},
                        {"seconds", seconds},         {"per_node", nlohmann::json::array()}};
  uint64_t read = 0;
  for (const std::string& text : nodes) {
    // A peer's summary, as NodeLoadStats::to_json wrote it; anything else is the peer's fault.
    nlohmann::json node = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!node.is_object() || !node.contains("bytes_read") ||
        !node["bytes_read"].is_number_unsigned()) {
      throw Error(ErrorKind::kNode, "a node sent a summary that is not one");
    }
    read += node["bytes_read"].get<uint64_t>();
    all["per_node"].push_back(std::move(node));
  }
  all["bytes_read"] = read;
  if (json) {
    std::cout << all.dump(1) << "\n";
    return;
  }
  for (const nlohmann::json& node : all["per_node"]) {
    std::cout << fmt::format(
        "node {} (ranks {}-{}): read {} bytes, sent {}, received {}, wrote {}; read {}, send {}, "
        "receive "
        "{}, write {} (io {}); postprocess {:.3f} s; total {:.3f} s\n",
        node["node"].get<int>(), node["ranks"][0].get<int>(), node["ranks"][1].get<int>(),
        node["bytes_read"].get<uint64_t>(), node["bytes_sent"].get<uint64_t>(),
        node["bytes_received"].get<uint64_t>(), node["bytes_written"].get<uint64_t>(),
        gbps(node["read_gbps"].get<double>()), gbps(node["send_gbps"].get<double>()),
        gbps(node["receive_gbps"].get<double>()), gbps(node["write_gbps"].get<double>()),
        node["io"].get<std::string>(), node["seconds_postprocess"].get<double>(),
        node["seconds"].get<double>());
  }
  std::cout << fmt::format(
      "loaded {} of {} (tp={} ep={}) on {} (read {}): read {} bytes from storage ({} needed); "
      "total {:.4f} s\n",
      count_of(plan.ranks.size(), "rank"), plan.model.architecture, plan.parallel.tp,
      plan.parallel.ep, count_of(static_cast<size_t>(reads.nodes), "node"),
      read_policy_name(reads.policy), read, reads.needed_bytes(), seconds);
}

}  // namespace

NodeModel open_on_every_node(Transport& transport, const std::string& model,
                             const ParallelConfig& parallel) {
  NodeModel out;
  try {
    run_on_every_node(transport, [&] {
      out.checkpoint.emplace(Checkpoint::open(model));
      out.plan.emplace(make_plan(*out.checkpoint, parallel));
      // A node count that does not divide the layout's ranks (mpirun -np 3 with --tp 4) is the
      // command line's mistake, as a --tp that does not fit the model is: checked here, with it.
      node_ranks(static_cast<int>(out.plan->ranks.size()), transport.nodes(), transport.node());
    });
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInvalidArgument) throw UsageError(e.what());
    throw;
  }
  if (transport.node() == 0) print_warnings(*out.checkpoint);
  check_same_plan(transport, *out.plan);
  return out;
}

void run_distributed_load(const DistributedLoadRequest& request) {
  Transport* const transport = &process_transport();
  const auto start = std::chrono::steady_clock::now();
  NodeModel model = open_on_every_node(*transport, request.model, request.parallel);
  const Checkpoint* const ckpt = &*model.checkpoint;
  const Plan* const plan = &*model.plan;
  const ReadAssignment reads = assign_reads(*plan, transport->nodes(), request.read);
  NodeLoadStats stats;
  const std::vector<RankWeights> ranks =
      load_node(*ckpt, *plan, reads, *transport, request.load, &stats);
  const double seconds = seconds_since(start);
  if (request.checksum) {
    std::string mine;
    for (const RankWeights& weights : ranks) mine += rank_checksums(*plan, weights);
    const std::vector<std::string> all = transport->all_gather(mine);
    if (transport->node() == 0) {
      for (const std::string& lines : all) std::cout << lines;
    }
  }
  const std::vector<std::string> summaries = transport->all_gather(stats.to_json().dump());
  if (transport->node() == 0) print_summary(*plan, reads, summaries, seconds, request.json);
  std::cout.flush();
}

}  // namespace shardload::cli
