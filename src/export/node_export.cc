// An export written by several nodes: node 0 stages the directory (beside --out, which must be on
// storage every node sees), every node writes its own ranks' files into it, node 0 writes the
// manifest from every node's file lists and moves the export into place. Each step ends with every
// node agreeing on its outcome, so a failure anywhere leaves --out as it was on every node.
#include <nlohmann/json.hpp>

#include "export/engine_tensors.h"
#include "export/export_steps.h"
#include "shardload/distributed.h"
#include "shardload/export.h"

namespace shardload {

void export_node_ranks(const Checkpoint& ckpt, const Plan& plan,
                       const std::vector<RankWeights>& ranks, const ExportOptions& options,
                       Transport& transport) {
  const bool first = transport.node() == 0;
  std::unique_ptr<StagingDir> staging;
  run_on_every_node(transport, [&] {
    check_export_target(ckpt.path(), options);
    check_engine_plan(plan, options.engine, export_use(options));
    if (first) staging = make_export_staging(options);
  });
  const std::string dir = transport.all_gather(first ? staging->path().string() : "")[0];
  nlohmann::json mine = nlohmann::json::array();
  run_on_every_node(transport, [&] {
    for (const RankWeights& weights : ranks) {
      mine.push_back(write_rank_files(plan, weights, dir, options.max_file_size, options.engine,
                                      export_use(options)));
    }
  });
  const std::vector<std::string> lists = transport.all_gather(mine.dump());
  run_on_every_node(transport, [&] {
    if (!first) return;
    nlohmann::json manifest_ranks = nlohmann::json::array();
    for (const std::string& list : lists) {
      for (nlohmann::json& entry : nlohmann::json::parse(list))
        manifest_ranks.push_back(std::move(entry));
    }
    finish_export(ckpt, plan, options.engine, export_use(options), manifest_ranks, *staging,
                  options.overwrite);
  });
}

}  // namespace shardload
