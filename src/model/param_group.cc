#include "shardload/model.h"

namespace shardload {

std::string_view group_name(ParamGroup group) {
  switch (group) {
    case ParamGroup::kAttention: return "attention";
    case ParamGroup::kEmbedding: return "embedding";
    case ParamGroup::kLmHead: return "lm_head";
    case ParamGroup::kDenseMlp: return "dense_mlp";
    case ParamGroup::kSharedExperts: return "shared_experts";
    case ParamGroup::kExperts: return "experts";
    case ParamGroup::kReplicated: return "replicated";
  }
  return "?";
}

}  // namespace shardload
