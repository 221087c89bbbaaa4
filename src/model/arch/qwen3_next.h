#pragma once

// What Qwen3.5 (qwen3_5.cc) shares with Qwen3-Next (qwen3_next.cc): the hybrid layers' config
// fields, the gated softmax attention, the gated DeltaNet's tensors after its input projections,
// and the MoE block (routed experts, one shared expert with its sigmoid gate).

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/arch/family.h"

namespace shardload::arch::qwen3_next {

uint64_t key_dim(const ModelConfig& m);    // linear key heads x their dim: the q and the k rows
uint64_t value_dim(const ModelConfig& m);  // linear value heads x their dim: the v and the z rows

// q_proj (query and gate rows per head) / k / v fused as qkv_proj, o_proj, float32 q/k norms.
std::vector<ParamRule> gated_attention_rules();
// conv1d (its q, k and v channel ranges), A_log (float32), dt_bias, the gated norm, out_proj.
std::vector<ParamRule> delta_net_rules();
// Routed experts, the shared expert and its gate of a MoE layer.
std::vector<ParamRule> moe_rules();
// The common skips and the multi-token-prediction block (mtp.*), which the engines' main models do
// not load.
std::vector<SkipRule> skips();
// The linear-attention fields (transformers' Qwen3NextConfig defaults) and which layers are linear:
// layer_types, or else every layer but each full_attention_interval-th.
void read_hybrid_config(const nlohmann::json& config, ModelConfig& m);

// make-tiny: the hybrid layers' sizes (4 layers, every second full; linear heads that tp 8 divides).
void tiny_hybrid_defaults(TinySizes& m);
// make-tiny: whether a layer is linear attention (every full_attention_interval-th is full).
bool tiny_linear_layer(const TinySizes& m, int layer);
// make-tiny: the hybrid layers' config fields (partial rotary, full_attention_interval, linear_*).
void tiny_hybrid_config(const TinySizes& m, nlohmann::json& c);
// make-tiny: a MoE block under prefix ("...mlp."): router, routed experts, the shared expert and its gate.
void write_moe(const TinySizes& m, TensorWriter& w, const std::string& prefix);
// make-tiny: the gated attention's tensors under prefix ("...self_attn.").
void write_gated_attention(const TinySizes& m, TensorWriter& w, const std::string& prefix);

}  // namespace shardload::arch::qwen3_next
