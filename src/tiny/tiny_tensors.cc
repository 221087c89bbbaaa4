// The checkpoint tensors of each family: exactly the names and shapes Hugging Face checkpoints
// carry.

#include <string>
#include <utility>
#include <vector>

#include "tiny/tiny_model.h"
#include "tiny/tiny_quant.h"

namespace shardload::tiny {

namespace {

class Builder {
 public:
  explicit Builder(const TinyModel& model) : m_(model) {}

  std::vector<TensorSpec> take() { return std::move(specs_); }

  void add(std::string name, Shape shape, ValueKind kind = ValueKind::kWeight,
           DType dtype = DType::kBF16) {
    specs_.push_back({std::move(name), dtype, std::move(shape), kind});
  }
  // A projection is FP8 with its scales under --quant; routers and heads, also linear, never are.
  void linear(const std::string& module, uint64_t out, uint64_t in) {
    if (m_.quant == Quant::kNone || !is_fp8_weight(module + ".weight")) {
      add(module + ".weight", {out, in});
      return;
    }
    for (TensorSpec& spec : fp8_tensors(module, {out, in}, m_.quant, m_.static_activations)) {
      specs_.push_back(std::move(spec));
    }
  }
  void bias(const std::string& module, uint64_t out) {
    add(module + ".bias", {out}, ValueKind::kBias);
  }
  void norm(const std::string& module, uint64_t size) {
    add(module + ".weight", {size}, ValueKind::kNorm);
  }

  // One decoder layer; `p` ends with a dot ("model.layers.3.").
  void decoder_layer(const std::string& p, int index) {
    norm(p + "input_layernorm", m_.hidden);
    if (m_.kv_lora_rank > 0) {
      latent_attention(p + "self_attn.");
    } else {
      attention(p + "self_attn.");
    }
    norm(p + "post_attention_layernorm", m_.hidden);
    if (is_moe_layer(m_, index)) {
      moe(p);
    } else {
      mlp(p + "mlp.", m_.intermediate);
    }
  }

  void mlp(const std::string& p, uint64_t size) {
    linear(p + "gate_proj", size, m_.hidden);
    linear(p + "up_proj", size, m_.hidden);
    linear(p + "down_proj", m_.hidden, size);
  }

 private:
  void attention(const std::string& p) {
    const uint64_t q = m_.heads * m_.head_dim;
    const uint64_t kv = m_.kv_heads * m_.head_dim;
    const bool qkv_bias = m_.family == Family::kQwen2 || m_.family == Family::kQwen2Moe;
    linear(p + "q_proj", q, m_.hidden);
    if (qkv_bias) bias(p + "q_proj", q);
    linear(p + "k_proj", kv, m_.hidden);
    if (qkv_bias) bias(p + "k_proj", kv);
    linear(p + "v_proj", kv, m_.hidden);
    if (qkv_bias) bias(p + "v_proj", kv);
    linear(p + "o_proj", m_.hidden, q);
    if (m_.family == Family::kQwen3 || m_.family == Family::kQwen3Moe) {
      norm(p + "q_norm", m_.head_dim);
      norm(p + "k_norm", m_.head_dim);
    }
  }

  void latent_attention(const std::string& p) {
    const uint64_t q = m_.heads * (m_.qk_nope_head_dim + m_.qk_rope_head_dim);
    if (m_.q_lora_rank > 0) {
      linear(p + "q_a_proj", m_.q_lora_rank, m_.hidden);
      norm(p + "q_a_layernorm", m_.q_lora_rank);
      linear(p + "q_b_proj", q, m_.q_lora_rank);
    } else {
      linear(p + "q_proj", q, m_.hidden);
    }
    linear(p + "kv_a_proj_with_mqa", m_.kv_lora_rank + m_.qk_rope_head_dim, m_.hidden);
    norm(p + "kv_a_layernorm", m_.kv_lora_rank);
    linear(p + "kv_b_proj", m_.heads * (m_.qk_nope_head_dim + m_.v_head_dim), m_.kv_lora_rank);
    linear(p + "o_proj", m_.hidden, m_.heads * m_.v_head_dim);
  }

  void experts(const std::string& p, uint64_t size) {
    for (uint64_t x = 0; x < m_.experts; ++x) mlp(p + "experts." + std::to_string(x) + ".", size);
  }

  void moe(const std::string& layer) {
    const std::string p = layer + "mlp.";
    const uint64_t e = m_.experts;
    const uint64_t shared = m_.shared_experts * m_.moe_intermediate;
    switch (m_.family) {
      case Family::kLlama:
      case Family::kQwen2:
      case Family::kQwen3:
        return;
      case Family::kQwen2Moe:
        linear(p + "gate", e, m_.hidden);
        experts(p, m_.moe_intermediate);
        mlp(p + "shared_expert.", m_.shared_intermediate);
        linear(p + "shared_expert_gate", 1, m_.hidden);
        return;
      case Family::kQwen3Moe:
        linear(p + "gate", e, m_.hidden);
        experts(p, m_.moe_intermediate);
        return;
      case Family::kMixtral: {
        const std::string b = layer + "block_sparse_moe.";
        linear(b + "gate", e, m_.hidden);
        for (uint64_t x = 0; x < e; ++x) {
          const std::string ex = b + "experts." + std::to_string(x) + ".";
          linear(ex + "w1", m_.intermediate, m_.hidden);
          linear(ex + "w2", m_.hidden, m_.intermediate);
          linear(ex + "w3", m_.intermediate, m_.hidden);
        }
        return;
      }
      case Family::kDeepseekV2:
      case Family::kDeepseekV3:
        linear(p + "gate", e, m_.hidden);
        if (m_.family == Family::kDeepseekV3) {
          add(p + "gate.e_score_correction_bias", {e}, ValueKind::kBias, DType::kF32);
        }
        experts(p, m_.moe_intermediate);
        mlp(p + "shared_experts.", shared);
        return;
      case Family::kErnie45Moe:
        // ERNIE keeps its router and the aux-free bias in float32 on disk.
        add(p + "gate.weight", {e, m_.hidden}, ValueKind::kWeight, DType::kF32);
        experts(p, m_.moe_intermediate);
        mlp(p + "shared_experts.", shared);
        add(p + "moe_statics.e_score_correction_bias", {1, e}, ValueKind::kBias, DType::kF32);
        return;
    }
  }

  const TinyModel& m_;
  std::vector<TensorSpec> specs_;
};

// DeepSeek-V3 multi-token prediction: whole extra layers after the last one, with their own
// embedding and head copies (loaders skip layers >= num_hidden_layers).
void deepseek_mtp(Builder& b, const TinyModel& m) {
  for (int k = 0; k < m.mtp_layers; ++k) {
    const int index = m.layers + k;
    const std::string p = "model.layers." + std::to_string(index) + ".";
    b.add(p + "embed_tokens.weight", {m.vocab, m.hidden});
    b.norm(p + "enorm", m.hidden);
    b.norm(p + "hnorm", m.hidden);
    b.linear(p + "eh_proj", m.hidden, 2 * m.hidden);
    b.decoder_layer(p, index);
    b.norm(p + "shared_head.norm", m.hidden);
    b.linear(p + "shared_head.head", m.vocab, m.hidden);
  }
}

// ERNIE-4.5 multi-token prediction: indexed top-level modules whose names contain "mtp"; the block
// is a plain dense decoder layer.
void ernie_mtp(Builder& b, const TinyModel& m) {
  for (int k = 0; k < m.mtp_layers; ++k) {
    const std::string i = std::to_string(k);
    b.norm("model.mtp_emb_norm." + i, m.hidden);
    b.norm("model.mtp_hidden_norm." + i, m.hidden);
    b.linear("model.mtp_linear_proj." + i, m.hidden, 2 * m.hidden);
    const std::string p = "model.mtp_block." + i + ".";
    b.norm(p + "input_layernorm", m.hidden);
    b.linear(p + "self_attn.q_proj", m.heads * m.head_dim, m.hidden);
    b.linear(p + "self_attn.k_proj", m.kv_heads * m.head_dim, m.hidden);
    b.linear(p + "self_attn.v_proj", m.kv_heads * m.head_dim, m.hidden);
    b.linear(p + "self_attn.o_proj", m.hidden, m.heads * m.head_dim);
    b.norm(p + "post_attention_layernorm", m.hidden);
    b.mlp(p + "mlp.", m.intermediate);
  }
}

}  // namespace

std::vector<TensorSpec> model_tensors(const TinyModel& m) {
  Builder b(m);
  b.add("model.embed_tokens.weight", {m.vocab, m.hidden});
  for (int i = 0; i < m.layers; ++i) b.decoder_layer("model.layers." + std::to_string(i) + ".", i);
  b.norm("model.norm", m.hidden);
  if (!m.tie_embeddings) b.linear("lm_head", m.vocab, m.hidden);
  if (m.family == Family::kDeepseekV3) deepseek_mtp(b, m);
  if (m.family == Family::kErnie45Moe) ernie_mtp(b, m);
  return b.take();
}

uint64_t total_bytes(const TinyModel& m) {
  uint64_t total = 0;
  for (const TensorSpec& spec : model_tensors(m)) total += shape_nbytes(spec.shape, spec.dtype);
  return total;
}

}  // namespace shardload::tiny
