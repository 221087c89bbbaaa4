// Config readers and table rules shared by related families.
#include "model/arch/family.h"
#include "model/config_fields.h"

namespace shardload::arch {

using namespace config;

void read_qwen_moe_config(const nlohmann::json& c, ModelConfig& m, bool shared_expert) {
  m.experts = get_uint(c, "num_experts", 0, kMaxExperts);
  if (m.experts == 0) return;
  m.moe_intermediate = get_positive(c, "moe_intermediate_size");
  if (shared_expert) m.shared_intermediate = get_uint(c, "shared_expert_intermediate_size", 0);
  const uint64_t step = get_positive(c, "decoder_sparse_step", 1);
  for (int i = 0; i < m.layers; ++i) {
    m.moe_layer[i] = !in_list(c, "mlp_only_layers", i) && (i + 1) % step == 0;
  }
}

void read_routed_moe_config(const nlohmann::json& c, ModelConfig& m) {
  m.experts = get_uint(c, "n_routed_experts", 0, kMaxExperts);
  if (m.experts == 0) return;
  m.moe_intermediate = get_positive(c, "moe_intermediate_size");
  m.shared_intermediate =
      m.moe_intermediate * get_uint(c, "n_shared_experts", 0, kMaxSharedExperts);
  const uint64_t first = get_uint(c, "first_k_dense_replace", 0);
  const uint64_t freq = get_positive(c, "moe_layer_freq", 1);
  for (int i = 0; i < m.layers; ++i) {
    m.moe_layer[i] = static_cast<uint64_t>(i) >= first && i % freq == 0;
  }
  m.n_group = get_uint(c, "n_group", 1, kMaxExpertGroups);
}

ParamRule score_correction_bias_rule() {
  return {.target = "mlp.gate.e_score_correction_bias",
          .when = When::kMoeLayer,
          .parts = {{"mlp.gate.e_score_correction_bias", Split::kReplicated,
                     [](const ModelConfig& m) { return Shape{m.experts}; }}},
          .keep = Keep::kFloat32};
}

}  // namespace shardload::arch
