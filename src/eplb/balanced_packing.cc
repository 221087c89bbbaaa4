#include <algorithm>
#include <numeric>

#include "eplb/steps.h"

namespace shardload::eplb {

Packing balanced_packing(std::span<const float> weights, int packs) {
  const int n = static_cast<int>(weights.size());
  const int per_pack = n / packs;
  Packing out{.pack = std::vector<int>(n), .rank = std::vector<int>(n, 0)};
  if (per_pack == 1) {
    // The reference skips sorting here, so equal weights must not be reordered.
    std::iota(out.pack.begin(), out.pack.end(), 0);
    return out;
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  // Stable, so that equal weights keep index order: this decides ties the way the golden vectors
  // expect.
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return weights[a] > weights[b]; });
  std::vector<float> pack_weight(packs, 0.0f);
  std::vector<int> pack_items(packs, 0);
  for (const int item : order) {
    int best = -1;
    for (int p = 0; p < packs; ++p) {
      if (pack_items[p] == per_pack) continue;
      // Strictly lighter only: the lowest index wins a tie.
      if (best < 0 || pack_weight[p] < pack_weight[best]) best = p;
    }
    out.pack[item] = best;
    out.rank[item] = pack_items[best];
    pack_weight[best] += weights[item];
    ++pack_items[best];
  }
  return out;
}

}  // namespace shardload::eplb
