// What each node of a server on several nodes reports to node 0.
#include "serve/cluster_ops.h"
#include "shardload/loader.h"

namespace shardload::serve {

nlohmann::json rank_checksums(const LiveModel& live) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankWeights& weights : live.ranks) {
    nlohmann::json tensors = nlohmann::json::object();
    for (const PlanParam& param : live.plan.ranks[static_cast<size_t>(weights.rank)].params) {
      if (param.exported()) tensors[param.name] = xxh3_hex(param_view(weights, param).data);
    }
    ranks.push_back({{"rank", weights.rank}, {"tensors", std::move(tensors)}});
  }
  return ranks;
}

nlohmann::json node_checksums(const ShmStore& store) {
  return {{"node", store.scope().node},
          {"version", store.live().version},
          {"ranks", rank_checksums(store.live())}};
}

nlohmann::json node_state(const ShmStore& store) {
  const NodeScope& scope = store.scope();
  return {{"node", scope.node},
          {"ranks", {scope.held.first, scope.held.last - 1}},
          {"shm_dir", store.dir()},
          {"version", store.live().version},
          {"model_path", store.live().model_path}};
}

}  // namespace shardload::serve
