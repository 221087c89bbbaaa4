// Which ranks split each parameter group under data-parallel attention (docs/layout.md,
// "Data-parallel attention"): the one place the engines' DP layouts are spelled out.
#include <algorithm>

#include "shardload/plan.h"

namespace shardload {

Scope ParallelConfig::scope(ParamGroup group) const {
  // At dp 1 the attention group is the world; naming it so keeps the plain layout's answers plain.
  const Scope dp_scope = dp > 1 ? Scope::kAttention : Scope::kWorld;
  const bool vllm = dp_style == DpStyle::kVllm;  // a vLLM DP replica holds every dense group
  switch (group) {
    case ParamGroup::kAttention: return dp_scope;
    case ParamGroup::kEmbedding:
      return vllm ? dp_scope : dp > 1 ? Scope::kReplicated : Scope::kWorld;
    case ParamGroup::kLmHead: return vllm || dp_lm_head ? dp_scope : Scope::kWorld;
    case ParamGroup::kDenseMlp:
      return replicate_dense_mlp ? Scope::kReplicated : vllm ? dp_scope : Scope::kWorld;
    case ParamGroup::kSharedExperts:
      return !split_shared_experts ? Scope::kReplicated : vllm ? dp_scope : Scope::kWorld;
    case ParamGroup::kExperts: return Scope::kWorld;
    case ParamGroup::kReplicated: return Scope::kReplicated;
  }
  return Scope::kWorld;
}

SplitGroup ParallelConfig::split_group(ParamGroup group, int rank) const {
  const uint64_t g = static_cast<uint64_t>(rank);
  if (group == ParamGroup::kExperts) {
    const uint64_t moe_tp = static_cast<uint64_t>(tp / ep);
    return {moe_tp, g % moe_tp};
  }
  switch (scope(group)) {
    case Scope::kWorld: return {static_cast<uint64_t>(tp), g};
    case Scope::kAttention: {
      const uint64_t a = static_cast<uint64_t>(attention_tp());
      return {a, g % a};
    }
    case Scope::kReplicated: return {1, 0};
  }
  return {1, 0};
}

bool ParallelConfig::has_dp_fields() const {
  if (dp > 1) return true;
  ParallelConfig plain;
  plain.tp = tp;
  plain.split_shared_experts = split_shared_experts;
  return std::any_of(std::begin(kScopedGroups), std::end(kScopedGroups),
                     [&](ParamGroup group) { return scope(group) != plain.scope(group); });
}

}  // namespace shardload
