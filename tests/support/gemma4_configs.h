#pragma once

// Small Gemma 4 text configs (tests/model's family test, tests/shard's plan test): six layers, the third
// and the last with full attention, the published 26B-A4B's kinds of layers.

#include <nlohmann/json.hpp>

namespace shardload::testing {

inline nlohmann::json gemma4_text_config() {
  return {{"architectures", {"Gemma4ForCausalLM"}},
          {"model_type", "gemma4_text"},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"vocab_size", 300},
          {"num_hidden_layers", 6},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 16},
          {"global_head_dim", 32},
          {"num_global_key_value_heads", 1},
          {"attention_k_eq_v", true},
          {"hidden_size_per_layer_input", 0},
          {"layer_types",
           {"sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
            "full_attention"}}};
}

inline nlohmann::json gemma4_moe_config() {
  nlohmann::json c = gemma4_text_config();
  c["enable_moe_block"] = true;
  c["num_experts"] = 8;
  c["top_k_experts"] = 2;
  c["moe_intermediate_size"] = 32;
  return c;
}

}  // namespace shardload::testing
