#include "serve/engine_manifest.h"

#include "export/engine_tensors.h"

namespace shardload::serve {

nlohmann::json engine_manifest_ranks(const Plan& plan, NodeRanks held, Engine engine) {
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = held.first; r < held.last; ++r) {
    const RankPlan& rank = plan.ranks.at(static_cast<size_t>(r));
    ranks.push_back({{"rank", rank.rank}, {"tensors", engine_tensors_json(plan, rank, engine)}});
  }
  return ranks;
}

}  // namespace shardload::serve
