// What the families' generators share: default sizes, config.json fields of related families, and
// the tensors of attention, MLP and decoder layers, in the order Hugging Face checkpoints carry
// them.

#include <algorithm>

#include "model/arch/family.h"

namespace shardload::arch {

using nlohmann::json;

TinySizes tiny_base_sizes() {
  TinySizes m;
  m.hidden = 128;
  m.intermediate = 384;
  m.heads = 8;
  m.kv_heads = 2;
  m.head_dim = 16;
  m.vocab = 1000;
  m.layers = 3;
  return m;
}

void tiny_add_experts(TinySizes& m, uint64_t per_token) {
  m.experts = 8;
  m.experts_per_token = per_token;
  m.moe_intermediate = 64;
}

void tiny_rope(json& c, double theta, double eps, int max_positions) {
  c["rope_theta"] = theta;
  c["rms_norm_eps"] = eps;
  c["max_position_embeddings"] = max_positions;
}

void tiny_qwen_config(json& c, const TinySizes& m, int max_positions) {
  tiny_rope(c, 1000000.0, 1e-6, max_positions);
  c["attention_dropout"] = 0.0;
  c["max_window_layers"] = m.layers;
  c["use_sliding_window"] = false;
  c["sliding_window"] = nullptr;
}

void tiny_qwen3_config(json& c, const TinySizes& m) {
  c["head_dim"] = m.head_dim;
  c["attention_bias"] = false;
  c["rope_scaling"] = nullptr;
}

void tiny_qwen_moe_config(json& c, const TinySizes& m) {
  c["num_experts"] = m.experts;
  c["num_experts_per_tok"] = m.experts_per_token;
  c["moe_intermediate_size"] = m.moe_intermediate;
  c["decoder_sparse_step"] = m.sparse_step;
  c["mlp_only_layers"] = m.mlp_only_layers;
  c["output_router_logits"] = false;
  c["router_aux_loss_coef"] = 0.001;
}

void tiny_routed_moe_config(json& c, const TinySizes& m) {
  c["n_routed_experts"] = m.experts;
  c["n_shared_experts"] = m.shared_experts;
  c["num_experts_per_tok"] = m.experts_per_token;
  c["moe_intermediate_size"] = m.moe_intermediate;
  c["first_k_dense_replace"] = m.first_moe_layer;
  c["n_group"] = m.n_group;
  c["topk_group"] = m.topk_group;
}

bool tiny_qwen_moe_layer(const TinySizes& m, int layer) {
  return (layer + 1) % m.sparse_step == 0 &&
         std::find(m.mlp_only_layers.begin(), m.mlp_only_layers.end(), layer) ==
             m.mlp_only_layers.end();
}

bool tiny_no_moe_layer(const TinySizes&, int) { return false; }

void write_attention(const TinySizes& m, TensorWriter& w, const std::string& p, bool qkv_bias,
                     bool qk_norm) {
  const uint64_t q = m.heads * m.head_dim;
  const uint64_t kv = m.kv_heads * m.head_dim;
  w.projection(p + "q_proj", q, m.hidden);
  if (qkv_bias) w.bias(p + "q_proj.bias", {q});
  w.projection(p + "k_proj", kv, m.hidden);
  if (qkv_bias) w.bias(p + "k_proj.bias", {kv});
  w.projection(p + "v_proj", kv, m.hidden);
  if (qkv_bias) w.bias(p + "v_proj.bias", {kv});
  w.projection(p + "o_proj", m.hidden, q);
  if (qk_norm) {
    w.norm(p + "q_norm", m.head_dim);
    w.norm(p + "k_norm", m.head_dim);
  }
}

void write_latent_attention(const TinySizes& m, TensorWriter& w, const std::string& p) {
  const uint64_t q = m.heads * (m.qk_nope_head_dim + m.qk_rope_head_dim);
  if (m.q_lora_rank > 0) {
    w.projection(p + "q_a_proj", m.q_lora_rank, m.hidden);
    w.norm(p + "q_a_layernorm", m.q_lora_rank);
    w.projection(p + "q_b_proj", q, m.q_lora_rank);
  } else {
    w.projection(p + "q_proj", q, m.hidden);
  }
  w.projection(p + "kv_a_proj_with_mqa", m.kv_lora_rank + m.qk_rope_head_dim, m.hidden);
  w.norm(p + "kv_a_layernorm", m.kv_lora_rank);
  w.projection(p + "kv_b_proj", m.heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank);
  w.projection(p + "o_proj", m.hidden, m.heads * m.v_head_dim);
}

void write_mlp(const TinySizes& m, TensorWriter& w, const std::string& p, uint64_t size) {
  w.projection(p + "gate_proj", size, m.hidden);
  w.projection(p + "up_proj", size, m.hidden);
  w.projection(p + "down_proj", m.hidden, size);
}

void write_w1_w3_w2_experts(const TinySizes& m, TensorWriter& w, const std::string& p, uint64_t size) {
  for (uint64_t x = 0; x < m.experts; ++x) {
    const std::string ex = p + "experts." + std::to_string(x) + ".";
    w.projection(ex + "w1", size, m.hidden);
    w.projection(ex + "w2", m.hidden, size);
    w.projection(ex + "w3", size, m.hidden);
  }
}

void write_experts(const TinySizes& m, TensorWriter& w, const std::string& p, uint64_t size) {
  for (uint64_t x = 0; x < m.experts; ++x)
    write_mlp(m, w, p + "experts." + std::to_string(x) + ".", size);
}

void write_decoder_layer(const TinySizes& m, TensorWriter& w, const TinyLayerWriter& layer,
                         const std::string& p, int index) {
  w.norm(p + "input_layernorm", m.hidden);
  layer.attention(m, w, p + "self_attn.");
  w.norm(p + "post_attention_layernorm", m.hidden);
  if (m.experts > 0 && layer.moe_layer(m, index)) {
    layer.moe(m, w, p);
  } else {
    write_mlp(m, w, p + "mlp.", m.intermediate);
  }
}

void write_decoder_model(const TinySizes& m, TensorWriter& w, const TinyLayerWriter& layer) {
  w.weight("model.embed_tokens.weight", {m.vocab, m.hidden});
  for (int i = 0; i < m.layers; ++i) {
    write_decoder_layer(m, w, layer, "model.layers." + std::to_string(i) + ".", i);
  }
  w.norm("model.norm", m.hidden);
  if (!m.tie_embeddings) w.weight("lm_head.weight", {m.vocab, m.hidden});
}

}  // namespace shardload::arch

namespace shardload::arch {

void write_mtp_layers(const TinySizes& m, TensorWriter& w, const TinyLayerWriter& layer) {
  for (int k = 0; k < m.mtp_layers; ++k) {
    const int index = m.layers + k;
    const std::string p = "model.layers." + std::to_string(index) + ".";
    w.weight(p + "embed_tokens.weight", {m.vocab, m.hidden});
    w.norm(p + "enorm", m.hidden);
    w.norm(p + "hnorm", m.hidden);
    w.projection(p + "eh_proj", m.hidden, 2 * m.hidden);
    write_decoder_layer(m, w, layer, p, index);
    w.norm(p + "shared_head.norm", m.hidden);
    w.weight(p + "shared_head.head.weight", {m.vocab, m.hidden});
  }
}

}  // namespace shardload::arch
