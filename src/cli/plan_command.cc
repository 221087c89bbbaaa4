#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/checkpoint_warnings.h"
#include "cli/commands.h"
#include "cli/export_note.h"
#include "cli/model_revision.h"
#include "cli/parallel_options.h"
#include "cli/read_options.h"
#include "core/plural.h"
#include "shardload/checkpoint.h"
#include "shardload/distributed.h"
#include "shardload/plan.h"

namespace shardload::cli {
namespace {

struct PlanOptions {
  std::string model;
  std::string revision;
  ParallelOptions parallel;
  int nodes = 1;
  ReadOptions read;
  bool json = false;
};

void print_nodes(const ReadAssignment& reads) {
  std::cout << fmt::format("nodes={} read={}: {} bytes needed, {} of up to {} bytes\n", reads.nodes,
                           read_policy_name(reads.policy), reads.needed_bytes(),
                           count_of(reads.chunks.size(), "chunk"), reads.chunk_bytes);
  for (size_t n = 0; n < reads.per_node.size(); ++n) {
    const NodeTraffic& node = reads.per_node[n];
    std::cout << fmt::format("node {} (ranks {}-{}): needs {} bytes, reads {}, sends {}, receives {}\n", n,
                             node.ranks.first, node.ranks.last - 1, node.needed, node.read, node.sent,
                             node.received);
  }
}

void run_plan(const PlanOptions& options) {
  refuse_export_as_checkpoint(options.model, "plan");
  // The layout is read (and the expert map checked) before the checkpoint is opened.
  const ParallelConfig parallel = options.parallel.to_config();
  const Checkpoint ckpt = Checkpoint::open(options.model);
  print_warnings(ckpt);
  const Plan plan = plan_for_flags(ckpt, parallel);
  const bool by_node = options.nodes != 1 || options.read.read != "striped";
  if (options.json) {
    nlohmann::json json = plan.to_json();
    if (by_node) json["distributed"] = assign_reads(plan, options.nodes, options.read.policy()).to_json();
    std::cout << json.dump(1) << "\n";
    return;
  }
  std::cout << fmt::format("{} ({}): tp={} ep={} moe_tp={} dtype={}", plan.model.architecture,
                           family_name(plan.model.family), plan.parallel.tp, plan.parallel.ep,
                           plan.moe_tp, dtype_name(plan.dtype));
  if (plan.physical_experts > 0) std::cout << fmt::format(" physical_experts={}", plan.physical_experts);
  std::cout << fmt::format(", {}, {} skipped\n", count_of(plan.sources.size(), "source"),
                           plan.skipped.size());
  const bool dp = plan.parallel.has_dp_fields();
  if (dp) {
    std::cout << fmt::format("dp={} attn_tp={} dp_style={}, scopes:", plan.parallel.dp,
                             plan.parallel.attention_tp(), dp_style_name(plan.parallel.dp_style));
    for (const ParamGroup group : kScopedGroups) {
      std::cout << fmt::format(" {}={}", group_name(group), scope_name(plan.parallel.scope(group)));
    }
    std::cout << "\n";
  }
  for (const RankPlan& rank : plan.ranks) {
    size_t pieces = 0;
    for (const PlanParam& param : rank.params) pieces += param.pieces.size();
    const std::string dp_ranks =
        dp ? fmt::format(", dp {}, attn_tp {}", rank.dp_rank, rank.attention_rank) : "";
    std::cout << fmt::format("rank {} (ep {}, moe_tp {}{}): {}, {}, {} bytes, reads {} bytes\n",
                             rank.rank, rank.ep_rank, rank.moe_tp_rank, dp_ranks,
                             count_of(rank.params.size(), "param"), count_of(pieces, "piece"),
                             rank.bytes, rank.read_bytes);
  }
  if (by_node) print_nodes(assign_reads(plan, options.nodes, options.read.policy()));
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "Print the per-rank plan: parameters, source byte ranges, bytes");
  cmd->footer("Example: shardload plan build/tiny-qwen3-moe --tp 4 --ep 2");
  cmd->add_option("model", options->model,
                  "Model directory, or a Hugging Face model id in the local cache")
      ->required();
  add_revision_option(*cmd, options->revision);
  add_parallel_options(*cmd, options->parallel);
  cmd->add_option("--nodes", options->nodes,
                  "Also plan a load over this many nodes (node n holds ranks n*T/N to (n+1)*T/N - 1): "
                  "the bytes each reads, sends and receives")
      ->check(CLI::Range(1, kMaxNodes));
  add_read_option(*cmd, options->read);
  cmd->add_flag("--json", options->json, "Print the whole plan as JSON (every piece and byte run)");
  cmd->callback([options] {
    options->model = model_at_revision(options->model, options->revision);
    run_plan(*options);
  });
}

}  // namespace shardload::cli
