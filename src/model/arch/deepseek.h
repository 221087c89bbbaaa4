#pragma once

// DeepSeek-V2 / V3's pieces (deepseek.cc) and V3.2's indexer (deepseek_indexer.cc) that DeepSeek-V3.2
// (deepseek_v32.cc) and the GLM families with latent attention (glm4_moe_lite.cc, glm_moe_dsa.cc) build on.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
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


// DeepSeek-V3.2's sparse-attention indexer of every layer (self_attn.indexer.), replicated.
std::vector<ParamRule> indexer_rules();
// index_n_heads and index_head_dim; `model` names the family in the error of a config without
// q_lora_rank, whose output the indexer reads.
void read_indexer_config(const nlohmann::json& config, ModelConfig& m, std::string_view model);
// The indexer's tensors under `attention` ("model.layers.{i}.self_attn.").
void write_indexer(const TinySizes& m, TensorWriter& w, const std::string& attention);
void tiny_indexer_defaults(TinySizes& m);
void tiny_indexer_block_fp8(TinySizes& m);
void tiny_indexer_config(const TinySizes& m, nlohmann::json& config);
// DeepSeek-V3.2's table (V3's layer with the score bias, the indexer, MTP layers skipped), which GLM-5
// has under the same names.
const ArchTable& indexed_table();
// make-tiny's V3.2 layer: the latent attention with the indexer, and the MoE block with the score bias.
void write_indexed_attention(const TinySizes& m, TensorWriter& w, const std::string& attention);
void write_moe_with_score_bias(const TinySizes& m, TensorWriter& w, const std::string& layer);

}  // namespace shardload::arch::deepseek
