// GLM's latent-attention families read and written with DeepSeek-V3's rules (deepseek.cc) and GLM's
// config fields.
#include "model/arch/glm_mla.h"

#include <fmt/format.h>

#include <string>

#include "model/arch/deepseek.h"
#include "model/config_fields.h"

namespace shardload::arch::glm_mla {

using nlohmann::json;

namespace {

// transformers' per-layer MLP kinds, checked against the layer count.
std::vector<bool> sparse_layers(const json& types, int layers) {
  if (!types.is_array() || types.size() != static_cast<size_t>(layers)) {
    throw config::config_error(
        "not one MLP kind per layer", "mlp_layer_types",
        fmt::format("a list of {} \"dense\" or \"sparse\"", layers),
        types.is_array() ? fmt::format("{} entries", types.size()) : types.type_name());
  }
  std::vector<bool> sparse;
  for (const json& kind : types) {
    if (kind != "dense" && kind != "sparse") {
      throw config::config_error("unknown MLP kind", "mlp_layer_types", "\"dense\" or \"sparse\"",
                                 kind.dump());
    }
    sparse.push_back(kind == "sparse");
  }
  return sparse;
}

}  // namespace

void read_config(const json& c, ModelConfig& m, uint64_t default_dense) {
  deepseek::read_config(
      c, m);  // m.moe_layer from first_k_dense_replace (absent: 0) and moe_layer_freq
  if (m.experts == 0) return;
  const json* types = config::field(c, "mlp_layer_types");
  const json* first = config::field(c, "first_k_dense_replace");
  if (types == nullptr) {
    if (first != nullptr) return;
    for (int i = 0; i < m.layers; ++i) m.moe_layer[i] = static_cast<uint64_t>(i) >= default_dense;
    return;
  }
  const std::vector<bool> sparse = sparse_layers(*types, m.layers);
  for (int i = 0; i < m.layers; ++i) {
    // vLLM builds the layers first_k_dense_replace says, transformers those mlp_layer_types says:
    // a checkpoint where they differ is two models.
    if (first != nullptr && m.moe_layer[i] != sparse[i]) {
      throw config::config_error(fmt::format("mlp_layer_types and first_k_dense_replace (with "
                                             "moe_layer_freq) disagree on layer {}",
                                             i),
                                 "mlp_layer_types", sparse[i] ? "\"dense\"" : "\"sparse\"",
                                 sparse[i] ? "\"sparse\"" : "\"dense\"");
    }
    m.moe_layer[i] = sparse[i];
  }
}

void tiny_defaults(TinySizes& m) {
  deepseek::tiny_defaults(m, /*v3=*/true);
  m.n_group = 1;  // GLM's published configs route over one group
}

bool moe_layer(const TinySizes& m, int layer) { return layer >= m.first_moe_layer; }

void tiny_config(const TinySizes& m, json& c) {
  tiny_rope(c, 1000000.0, 1e-5, 202752);
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["pad_token_id"] = kTinyPadTokenId;
  tiny_routed_moe_config(c, m);
  json types = json::array();
  for (int i = 0; i < m.layers; ++i)
    types.push_back(m.experts > 0 && moe_layer(m, i) ? "sparse" : "dense");
  c["mlp_layer_types"] = std::move(types);
  c["q_lora_rank"] = m.q_lora_rank == 0 ? json(nullptr) : json(m.q_lora_rank);
  c["kv_lora_rank"] = m.kv_lora_rank;
  c["qk_nope_head_dim"] = m.qk_nope_head_dim;
  c["qk_rope_head_dim"] = m.qk_rope_head_dim;
  c["v_head_dim"] = m.v_head_dim;
  c["norm_topk_prob"] = true;
  c["routed_scaling_factor"] = 1.8;
  c["topk_method"] = "noaux_tc";
  c["partial_rotary_factor"] = 1.0;
  c["rope_interleave"] = true;
  c["rope_scaling"] = nullptr;
  c["num_nextn_predict_layers"] = m.mtp_layers;
}

}  // namespace shardload::arch::glm_mla
