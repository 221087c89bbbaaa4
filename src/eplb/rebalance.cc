#include <algorithm>
#include <span>
#include <vector>

#include "eplb/steps.h"
#include "shardload/eplb.h"

namespace shardload {
namespace {

struct Shape {
  int experts;   // E
  int physical;  // P
  int groups;    // G (1 under the global policy)
  int nodes;     // N (1 under the global policy)
  int gpus;      // M
};

struct LayerPlacement {
  std::vector<int> physical_to_logical;  // [P]
  std::vector<int> replica_rank;         // [P]
  std::vector<int> logical_count;        // [E]
};

// The hierarchical procedure for one layer; the global policy is this with one group on one node.
LayerPlacement place_layer(std::span<const float> load, const Shape& s) {
  const int group_size = s.experts / s.groups;
  const int groups_per_node = s.groups / s.nodes;
  const int experts_per_node = s.experts / s.nodes;
  const int physical_per_node = s.physical / s.nodes;
  const int gpus_per_node = s.gpus / s.nodes;
  const int physical_per_gpu = s.physical / s.gpus;

  // (1) Whole groups go to nodes, so that a token's experts (chosen within a group) stay on one
  // node.
  std::vector<float> group_load(s.groups, 0.0f);
  for (int g = 0; g < s.groups; ++g) {
    for (int j = 0; j < group_size; ++j) group_load[g] += load[g * group_size + j];
  }
  const eplb::Packing groups = eplb::balanced_packing(group_load, s.nodes);
  // Meta-logical ids number the experts node by node: node n owns [n * E/N, (n+1) * E/N).
  std::vector<int> logical_to_meta(s.experts);
  std::vector<int> meta_to_logical(s.experts);
  for (int g = 0; g < s.groups; ++g) {
    const int first = (groups.pack[g] * groups_per_node + groups.rank[g]) * group_size;
    for (int j = 0; j < group_size; ++j) {
      logical_to_meta[g * group_size + j] = first + j;
      meta_to_logical[first + j] = g * group_size + j;
    }
  }

  LayerPlacement out{.physical_to_logical = std::vector<int>(s.physical),
                     .replica_rank = std::vector<int>(s.physical),
                     .logical_count = std::vector<int>(s.experts)};
  std::vector<int> meta_count(s.experts);
  std::vector<float> node_load(experts_per_node);
  std::vector<float> replica_load(physical_per_node);
  for (int node = 0; node < s.nodes; ++node) {
    const int meta_base = node * experts_per_node;
    for (int i = 0; i < experts_per_node; ++i) node_load[i] = load[meta_to_logical[meta_base + i]];
    // (2) Replicas are made within the node, so none of them crosses the slower inter-node link.
    const eplb::Replication rep = eplb::replicate_experts(node_load, physical_per_node);
    for (int i = 0; i < experts_per_node; ++i) meta_count[meta_base + i] = rep.count[i];
    // (3) Each replica carries an equal share of its expert's load when spread over the node's
    // GPUs.
    for (int r = 0; r < physical_per_node; ++r) {
      const int m = rep.physical_to_logical[r];
      replica_load[r] = node_load[m] / static_cast<float>(rep.count[m]);
    }
    const eplb::Packing gpus = eplb::balanced_packing(replica_load, gpus_per_node);
    // (4) A GPU's replicas take consecutive slots, in the order they joined it.
    for (int r = 0; r < physical_per_node; ++r) {
      const int slot = node * physical_per_node + gpus.pack[r] * physical_per_gpu + gpus.rank[r];
      out.physical_to_logical[slot] = meta_to_logical[meta_base + rep.physical_to_logical[r]];
      out.replica_rank[slot] = rep.rank[r];
    }
  }
  for (int l = 0; l < s.experts; ++l) out.logical_count[l] = meta_count[logical_to_meta[l]];
  return out;
}

}  // namespace

EplbResult rebalance_experts(const EplbInput& input) {
  validate_eplb_input(input);
  const bool hierarchical = eplb_is_hierarchical(input);
  const Shape shape{.experts = static_cast<int>(input.load[0].size()),
                    .physical = input.replicas,
                    .groups = hierarchical ? input.groups : 1,
                    .nodes = hierarchical ? input.nodes : 1,
                    .gpus = input.gpus};
  const size_t layers = input.load.size();
  std::vector<LayerPlacement> placed;
  placed.reserve(layers);
  std::vector<float> load(shape.experts);
  for (const std::vector<double>& row : input.load) {
    // The reference converts to float32 once, up front; all sums and shares are float32 from here.
    std::transform(row.begin(), row.end(), load.begin(),
                   [](double v) { return static_cast<float>(v); });
    placed.push_back(place_layer(load, shape));
  }

  int max_count = 0;
  for (const LayerPlacement& layer : placed) {
    max_count = std::max(max_count,
                         *std::max_element(layer.logical_count.begin(), layer.logical_count.end()));
  }
  EplbResult result;
  for (LayerPlacement& layer : placed) {
    std::vector<std::vector<int>> to_physical(shape.experts, std::vector<int>(max_count, -1));
    for (int slot = 0; slot < shape.physical; ++slot) {
      to_physical[layer.physical_to_logical[slot]][layer.replica_rank[slot]] = slot;
    }
    result.physical_to_logical_map.push_back(std::move(layer.physical_to_logical));
    result.logical_to_physical_map.push_back(std::move(to_physical));
    result.logical_count.push_back(std::move(layer.logical_count));
  }
  return result;
}

}  // namespace shardload
