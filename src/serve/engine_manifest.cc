#include "serve/engine_manifest.h"

#include "export/engine_tensors.h"

namespace shardload::serve {

nlohmann::json engine_manifest_ranks(const Plan& plan, NodeRanks held, Engine engine) {
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = held.first; r < held.last; ++r) {
    const RankPlan& rank = plan.ranks.at(static_cast<size_t>(r));
    nlohmann::json tensors = nlohmann::json::array();
    for (const EngineTensor& t : engine_tensors(plan, rank, engine)) {
      nlohmann::json entry = {{"name", t.name},
                              {"dtype", dtype_name(t.dtype)},
                              {"shape", t.shape},
                              {"source", nullptr},
                              {"source_shape", nullptr},
                              {"fill", t.fill}};
      if (t.param != nullptr) {
        entry["source"] = t.param->name;
        entry["source_shape"] = t.param->shape;
      }
      tensors.push_back(std::move(entry));
    }
    ranks.push_back({{"rank", rank.rank}, {"tensors", std::move(tensors)}});
  }
  return ranks;
}

}  // namespace shardload::serve
