// Every architecture table's rules belong to the group docs/layout.md ("Data-parallel
// attention") puts them in: a rule that cuts a tensor names the group whose scope decides the cut,
// and only norms, routers and other whole tensors are left in the replicated group.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "model/arch/family.h"
#include "model/arch_table.h"

namespace shardload::arch {
namespace {

// The group a target name implies, by the spec's table.
ParamGroup expected_group(const std::string& target, std::string_view family) {
  // MiniMax-M2's q/k norms cover the whole projection and are split with its heads.
  if (family == "minimax_m2" && (target == "self_attn.q_norm.weight" || target == "self_attn.k_norm.weight")) {
    return ParamGroup::kAttention;
  }
  // Qwen3-Next's linear attention is attention: split over the attention group, but its gated norm.
  if (target.starts_with("linear_attn.")) {
    return target == "linear_attn.norm.weight" ? ParamGroup::kReplicated : ParamGroup::kAttention;
  }
  // Gemma 4's per-layer embeddings: a vocab-parallel table and its projection, cut with the embedding.
  if (target == "model.embed_tokens.weight" || target == "model.embed_tokens_per_layer.weight" ||
      target == "model.per_layer_model_projection.weight") {
    return ParamGroup::kEmbedding;
  }
  if (target == "lm_head.weight") return ParamGroup::kLmHead;
  if (target.find("shared_expert") != std::string::npos && target.find("_proj.") != std::string::npos) {
    return ParamGroup::kSharedExperts;
  }
  if (target.find("experts.w13_") != std::string::npos || target.find("experts.w2_") != std::string::npos) {
    return ParamGroup::kExperts;  // weights, gpt-oss's MXFP4 scales and biases
  }
  if (target == "self_attn.sinks") return ParamGroup::kAttention;  // gpt-oss: one per query head
  // DeepSeek-V4: the query up-projection, the grouped output projection and the sinks split by head; its fused
  // wq_a / wkv, compressors and indexer are replicated.
  if (target == "attn.wq_b.weight" || target == "attn.wo_a.weight" || target == "attn.wo_b.weight" ||
      target == "attn.attn_sink") {
    return ParamGroup::kAttention;
  }
  // The MLA down-projections and DeepSeek-V3.2's indexer are replicated, every other attention projection split.
  if (target.starts_with("self_attn.") && target.find("_proj.") != std::string::npos &&
      target.find("fused_qkv_a_proj") == std::string::npos && target.find("kv_a_proj") == std::string::npos &&
      !target.starts_with("self_attn.indexer.")) {
    return ParamGroup::kAttention;
  }
  // Llama-4 names its MLPs (dense, shared, experts) feed_forward.
  if ((target.starts_with("mlp.") || target.starts_with("feed_forward.")) && target.find("_proj.") != std::string::npos) {
    return ParamGroup::kDenseMlp;
  }
  return ParamGroup::kReplicated;
}

TEST(RuleGroups, EveryRuleIsInTheSpecsGroup) {
  for (const Family* family : families()) {
    SCOPED_TRACE(std::string(family->name));
    const ArchTable& table = family->table();
    for (const auto* rules : {&table.model, &table.layer}) {
      for (const ParamRule& rule : *rules) {
        EXPECT_EQ(group_name(rule.group), group_name(expected_group(rule.target, family->name))) << rule.target;
        const bool cuts = std::any_of(rule.parts.begin(), rule.parts.end(),
                                      [](const Part& p) { return p.split != Split::kReplicated; });
        if (cuts) {
          EXPECT_NE(rule.group, ParamGroup::kReplicated) << rule.target << " is cut by no group";
        }
      }
    }
  }
}

}  // namespace
}  // namespace shardload::arch
