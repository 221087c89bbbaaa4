#include <numeric>

#include "eplb/steps.h"

namespace shardload::eplb {

Replication replicate_experts(std::span<const float> weights, int physical) {
  const int logical = static_cast<int>(weights.size());
  Replication out{.physical_to_logical = std::vector<int>(physical),
                  .rank = std::vector<int>(physical, 0),
                  .count = std::vector<int>(logical, 1)};
  std::iota(out.physical_to_logical.begin(), out.physical_to_logical.begin() + logical, 0);
  for (int p = logical; p < physical; ++p) {
    int best = 0;
    // Divided in float32 each time, not cached in double, so near-ties round as the reference's do.
    float best_load = weights[0] / static_cast<float>(out.count[0]);
    for (int j = 1; j < logical; ++j) {
      const float load = weights[j] / static_cast<float>(out.count[j]);
      if (load > best_load) {  // strictly larger: the lowest index wins a tie
        best = j;
        best_load = load;
      }
    }
    out.physical_to_logical[p] = best;
    out.rank[p] = out.count[best];
    ++out.count[best];
  }
  return out;
}

}  // namespace shardload::eplb
