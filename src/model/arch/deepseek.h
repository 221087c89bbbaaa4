#pragma once

// DeepSeek-V2 / V3's pieces (deepseek.cc) that DeepSeek-V3.2 (deepseek_v32.cc) builds on.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/arch/family.h"

namespace shardload::arch::deepseek {

// Norms, multi-head latent attention, dense MLP, routed and shared experts (and V3's score bias).
std::vector<ParamRule> layer_rules(bool score_bias);
// q_lora_rank, kv_lora_rank, the MLA head dims and the routed experts.
void read_config(const nlohmann::json& config, ModelConfig& m);
TinySizes& tiny_defaults(TinySizes& m, bool v3);
void tiny_block_fp8(TinySizes& m);
void tiny_config(const TinySizes& m, nlohmann::json& config, bool v3);
bool moe_layer(const TinySizes& m, int layer);
// Router, (score bias), routed experts and shared experts of a MoE layer ("model.layers.{i}.").
void write_moe(const TinySizes& m, TensorWriter& w, const std::string& layer, bool score_bias);

}  // namespace shardload::arch::deepseek
