#pragma once

// What GLM-4.7-Flash (glm4_moe_lite.cc) and GLM-5 (glm_moe_dsa.cc) share: DeepSeek-V3's latent
// attention, router and experts under the same tensor names, with GLM's config fields
// (glm_mla.cc).

#include <nlohmann/json.hpp>

#include "model/arch/family.h"

namespace shardload::arch::glm_mla {

// DeepSeek-V3's MLA dimensions and routed experts, then the dense layers: transformers' GLM configs
// list them in mlp_layer_types ("dense" / "sparse" per layer), vLLM reads first_k_dense_replace,
// and the published configs carry both. Either alone is read; both must agree. Neither:
// transformers' default of the family, the first `default_dense` layers dense.
void read_config(const nlohmann::json& config, ModelConfig& m, uint64_t default_dense);

// DeepSeek-V3's make-tiny sizes with GLM's single expert group.
void tiny_defaults(TinySizes& m);
// GLM's config fields: both spellings of the dense layers, topk_method noaux_tc (without it vLLM
// builds no score-correction bias) and GLM's rope (no yarn scaling).
void tiny_config(const TinySizes& m, nlohmann::json& config);
bool moe_layer(const TinySizes& m, int layer);

}  // namespace shardload::arch::glm_mla
