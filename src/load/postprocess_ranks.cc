#include "load/postprocess_ranks.h"

#include "core/parallel_for.h"

namespace shardload::load {

void postprocess_ranks(const Checkpoint& ckpt, const Plan& plan, std::vector<RankWeights>& ranks,
                       const std::vector<bool>& modules, int threads) {
  std::vector<uint32_t> list;
  for (uint32_t m = 0; m < plan.modules.size(); ++m) {
    if ((modules.empty() || modules[m]) && plan.modules[m].needs_postprocess()) list.push_back(m);
  }
  for (RankWeights& weights : ranks) {
    weights.processed.resize(plan.modules.size(), 0);
    for (uint32_t m = 0; m < plan.modules.size(); ++m) {
      if (modules.empty() || modules[m]) weights.processed[m] = 0;  // new bytes: not processed yet
    }
  }
  parallel_for(ranks.size() * list.size(), threads, [&](size_t i, int) {
    postprocess_modules(plan, ranks[i / list.size()], {list[i % list.size()]},
                        PostprocessMode::kOnce, &ckpt);
  });
  for (RankWeights& weights : ranks) {
    for (uint32_t m = 0; m < plan.modules.size(); ++m) {
      if (modules.empty() || modules[m]) weights.processed[m] = 1;  // nothing to do counts as done
    }
  }
}

}  // namespace shardload::load
