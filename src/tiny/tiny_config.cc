// config.json of each family, field names as in the family's published checkpoints.

#include "tiny/tiny_config.h"

#include <string>

#include "tiny/tiny_quant.h"

namespace shardload::tiny {

namespace {

using nlohmann::json;

// Fields every family writes.
json common(const TinyModel& m) {
  return {
      {"architectures", json::array({std::string(architecture_name(m.family))})},
      {"model_type", std::string(family_name(m.family))},
      {"hidden_size", m.hidden},
      {"intermediate_size", m.intermediate},
      {"num_attention_heads", m.heads},
      {"num_key_value_heads", m.kv_heads},
      {"num_hidden_layers", m.layers},
      {"vocab_size", m.vocab},
      {"tie_word_embeddings", m.tie_embeddings},
      {"torch_dtype", "bfloat16"},
      {"hidden_act", "silu"},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"bos_token_id", kBosTokenId},
      {"eos_token_id", kEosTokenId},
      {"transformers_version", "4.51.0"},
  };
}

void rope(json& c, double theta, double eps, int max_positions) {
  c["rope_theta"] = theta;
  c["rms_norm_eps"] = eps;
  c["max_position_embeddings"] = max_positions;
}

// Qwen2/Qwen3 (dense and MoE) share their attention and window fields.
void qwen(json& c, const TinyModel& m, int max_positions) {
  rope(c, 1000000.0, 1e-6, max_positions);
  c["attention_dropout"] = 0.0;
  c["max_window_layers"] = m.layers;
  c["use_sliding_window"] = false;
  c["sliding_window"] = nullptr;
}

void qwen3(json& c, const TinyModel& m) {
  c["head_dim"] = m.head_dim;
  c["attention_bias"] = false;
  c["rope_scaling"] = nullptr;
}

void qwen_moe(json& c, const TinyModel& m) {
  c["num_experts"] = m.experts;
  c["num_experts_per_tok"] = m.experts_per_token;
  c["moe_intermediate_size"] = m.moe_intermediate;
  c["decoder_sparse_step"] = m.sparse_step;
  c["mlp_only_layers"] = m.mlp_only_layers;
  c["output_router_logits"] = false;
  c["router_aux_loss_coef"] = 0.001;
}

void deepseek(json& c, const TinyModel& m, bool v3) {
  rope(c, 10000.0, 1e-6, 163840);
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["pretraining_tp"] = 1;
  c["aux_loss_alpha"] = 0.001;
  c["ep_size"] = 1;
  c["n_routed_experts"] = m.experts;
  c["n_shared_experts"] = m.shared_experts;
  c["num_experts_per_tok"] = m.experts_per_token;
  c["moe_intermediate_size"] = m.moe_intermediate;
  c["first_k_dense_replace"] = m.first_moe_layer;
  c["moe_layer_freq"] = m.sparse_step;
  c["n_group"] = m.n_group;
  c["topk_group"] = m.topk_group;
  c["q_lora_rank"] = m.q_lora_rank == 0 ? json(nullptr) : json(m.q_lora_rank);
  c["kv_lora_rank"] = m.kv_lora_rank;
  c["qk_nope_head_dim"] = m.qk_nope_head_dim;
  c["qk_rope_head_dim"] = m.qk_rope_head_dim;
  c["v_head_dim"] = m.v_head_dim;
  c["norm_topk_prob"] = v3;
  c["routed_scaling_factor"] = v3 ? 2.5 : 1.0;
  c["scoring_func"] = v3 ? "sigmoid" : "softmax";
  c["topk_method"] = v3 ? "noaux_tc" : "greedy";
  c["seq_aux"] = true;
  const double mscale = v3 ? 1.0 : 0.707;
  c["rope_scaling"] = {
      {"type", "yarn"},          {"factor", 40},   {"original_max_position_embeddings", 4096},
      {"beta_fast", 32},         {"beta_slow", 1}, {"mscale", mscale},
      {"mscale_all_dim", mscale}};
  if (v3) c["num_nextn_predict_layers"] = m.mtp_layers;
}

void ernie(json& c, const TinyModel& m) {
  rope(c, 500000.0, 1e-5, 131072);
  c["head_dim"] = m.head_dim;
  c["pad_token_id"] = kPadTokenId;
  c["use_bias"] = false;
  c["use_rmsnorm"] = true;
  c["use_moe"] = m.experts > 0;
  c["moe_num_experts"] = m.experts;
  c["moe_k"] = m.experts_per_token;
  c["moe_intermediate_size"] = m.moe_intermediate;
  c["moe_num_shared_experts"] = m.shared_experts;
  c["moe_layer_start_index"] = m.first_moe_layer;
  c["moe_layer_end_index"] = m.layers - 1;
  c["moe_layer_interval"] = m.sparse_step;
  c["moe_capacity"] = json::array({m.experts, m.experts, m.experts});
  c["moe_gate"] = "topk";
  c["moe_use_aux_free"] = true;
  c["num_nextn_predict_layers"] = m.mtp_layers;
}

// The quantization_config of AutoFP8 / vLLM "fp8" checkpoints, or of DeepSeek-V3's block FP8.
json quantization_config(const TinyModel& m) {
  if (m.quant == Quant::kFp8Block) {
    return {{"quant_method", "fp8"},
            {"activation_scheme", "dynamic"},
            {"fmt", "e4m3"},
            {"weight_block_size", json::array({kFp8Block, kFp8Block})}};
  }
  return {{"quant_method", "fp8"},
          {"activation_scheme", m.static_activations ? "static" : "dynamic"}};
}

}  // namespace

std::string_view architecture_name(Family family) {
  switch (family) {
    case Family::kLlama:
      return "LlamaForCausalLM";
    case Family::kQwen2:
      return "Qwen2ForCausalLM";
    case Family::kQwen3:
      return "Qwen3ForCausalLM";
    case Family::kQwen2Moe:
      return "Qwen2MoeForCausalLM";
    case Family::kQwen3Moe:
      return "Qwen3MoeForCausalLM";
    case Family::kMixtral:
      return "MixtralForCausalLM";
    case Family::kDeepseekV2:
      return "DeepseekV2ForCausalLM";
    case Family::kDeepseekV3:
      return "DeepseekV3ForCausalLM";
    case Family::kErnie45Moe:
      return "Ernie4_5_MoeForCausalLM";
  }
  return "?";
}

json config_json(const TinyModel& m) {
  json c = common(m);
  switch (m.family) {
    case Family::kLlama:
      rope(c, 500000.0, 1e-5, 8192);
      c["head_dim"] = m.head_dim;
      c["attention_bias"] = false;
      c["attention_dropout"] = 0.0;
      c["mlp_bias"] = false;
      c["pretraining_tp"] = 1;
      c["rope_scaling"] = nullptr;
      break;
    case Family::kQwen2:
      qwen(c, m, 32768);
      break;
    case Family::kQwen3:
      qwen(c, m, 40960);
      qwen3(c, m);
      break;
    case Family::kQwen2Moe:
      qwen(c, m, 8192);
      qwen_moe(c, m);
      c["shared_expert_intermediate_size"] = m.shared_intermediate;
      c["norm_topk_prob"] = false;
      break;
    case Family::kQwen3Moe:
      qwen(c, m, 40960);
      qwen3(c, m);
      qwen_moe(c, m);
      c["norm_topk_prob"] = true;
      break;
    case Family::kMixtral:
      rope(c, 1000000.0, 1e-5, 32768);
      c["attention_dropout"] = 0.0;
      c["num_local_experts"] = m.experts;
      c["num_experts_per_tok"] = m.experts_per_token;
      c["output_router_logits"] = false;
      c["router_aux_loss_coef"] = 0.02;
      c["sliding_window"] = nullptr;
      break;
    case Family::kDeepseekV2:
      deepseek(c, m, /*v3=*/false);
      break;
    case Family::kDeepseekV3:
      deepseek(c, m, /*v3=*/true);
      break;
    case Family::kErnie45Moe:
      ernie(c, m);
      break;
  }
  if (m.quant != Quant::kNone) c["quantization_config"] = quantization_config(m);
  return c;
}

}  // namespace shardload::tiny
