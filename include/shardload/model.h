#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shardload/dtype.h"

namespace shardload {

namespace arch {
struct Family;  // one architecture family (src/model/arch/family.h)
}
struct ExpertFormat;  // a format the routed experts keep as stored (shardload/weight_format.h)

// The family's name, config.json's model_type spelling ("qwen3_moe"); "?" for none.
std::string_view family_name(const arch::Family* family);

// config.json's spellings of the number of routed experts, one per family with experts, each once.
const std::vector<std::string_view>& expert_count_fields();

// The groups of parameters a layout splits on their own (docs/layout.md, "Data-parallel
// attention"). Norms, q/k norms, routers and score biases are kReplicated: whole on every rank.
enum class ParamGroup {
  kAttention,      // qkv / o, MLA q / q_b / kv_b / o, their biases
  kEmbedding,      // embed_tokens
  kLmHead,         // lm_head
  kDenseMlp,       // the MLP of dense layers
  kSharedExperts,  // shared_expert(s).*
  kExperts,        // routed experts: EP x MoE-TP over all T ranks, whatever the scopes
  kReplicated,
};

std::string_view group_name(ParamGroup group);  // "attention", "embedding", ..., "replicated"

// How the checkpoint's (or, for kFp8Dynamic, the loaded) linear weights are quantized (layout.md "FP8").
enum class Quantization {
  kNone,
  kFp8,         // static per-tensor: F8_E4M3 weights, weight_scale (and input_scale when static)
  kFp8Block,    // weight_block_size blocks: F8_E4M3 weights, weight_scale_inv per block
  kFp8Dynamic,  // --quantization fp8 on a bf16/fp16/fp32 checkpoint: quantized per rank tensor at load
  kWna16,       // integer weights (4 or 8 bits) packed into int32 words, scales per group or channel
  kInt8,        // int8 weights as stored, a scale per row; activations quantized per token at run time (W8A8)
  kNvfp4,       // FP4 (E2M1) weights two a byte, an FP8 scale per 16 inputs and a float32 global scale per tensor
  kGptq,        // GPTQ's integer weights packed along K into int32 words [K / pack, N], scales per group [K / g, N]
  kAwq,         // AWQ's int4 weights packed along N into int32 words [K, N / 8], scales and zero points per group
};

// "none", "fp8", "fp8-block", "fp8-dynamic", "wna16", "int8", "nvfp4", "gptq", "awq" (the manifest's spelling).
std::string_view quantization_name(Quantization quantization);

// Who wrote the FP8 checkpoint: the "fp8" quant_method (AutoFP8, DeepSeek, Qwen), or llm-compressor's
// "compressed-tensors" (docs/layout.md "compressed-tensors FP8"), whose scales are all `weight_scale`.
// kModelopt: NVIDIA ModelOpt's quant_method "modelopt" (its NVFP4: docs/layout.md "ModelOpt NVFP4").
enum class QuantFormat { kFp8, kCompressedTensors, kGptq, kAwq, kModelopt };
// compressed-tensors weights.strategy: one scale per tensor, per output row, per block, or per group of
// group_size inputs of a row.
enum class WeightStrategy { kTensor, kChannel, kBlock, kGroup };
std::string_view weight_strategy_name(WeightStrategy strategy);  // "tensor", "channel", "block", "group"

// block_cols of per-channel scales, planned as blocks of one row by a whole row: larger than any
// dimension (config values stop at 2^20), so a row is always one block wide.
inline constexpr uint64_t kWholeRow = uint64_t{1} << 40;

// What the sharding tables need from config.json, with the defaults of docs/layout.md applied.
// Zero means "the model has no such thing".
struct ModelConfig {
  std::string architecture;  // architectures[0]
  // Where the text model's tensors live in the checkpoint, before "model." and "lm_head." (a
  // multimodal checkpoint's "language_model."); the rank tensors keep it, as vLLM names them.
  std::string weight_prefix;
  const arch::Family* family = nullptr;  // from architectures[0]; never null after from_json
  DType dtype = DType::kBF16;  // torch_dtype (or dtype)
  uint64_t hidden = 0;
  uint64_t intermediate = 0;  // dense MLP
  uint64_t heads = 0;
  uint64_t kv_heads = 0;
  uint64_t head_dim = 0;
  uint64_t vocab = 0;
  int layers = 0;
  bool tie_embeddings = false;
  bool attention_bias = false;  // q/k/v/o biases (Llama attention_bias, ERNIE use_bias)
  bool qkv_bias = false;        // q/k/v biases only (Qwen2)
  bool mlp_bias = false;

  // Mixture of experts.
  uint64_t experts = 0;
  uint64_t moe_intermediate = 0;
  uint64_t shared_intermediate = 0;  // 0: no shared expert
  std::vector<bool> moe_layer;       // per decoder layer

  // DeepSeek multi-head latent attention.
  uint64_t q_lora_rank = 0;
  uint64_t kv_lora_rank = 0;
  uint64_t qk_nope_head_dim = 0;
  uint64_t qk_rope_head_dim = 0;
  uint64_t v_head_dim = 0;
  uint64_t n_group = 0;
  // DeepSeek-V3.2's sparse-attention indexer (every layer): index_n_heads x index_head_dim queries.
  uint64_t index_heads = 0;
  uint64_t index_head_dim = 0;

  // The format the routed experts keep as the checkpoint stores them, beside the linear weights'
  // (ExpertFormat, shardload/weight_format.h; the format file's reader or the family sets it): MXFP4 for
  // gpt-oss's quant_method "mxfp4" (everything else unquantized) and DeepSeek-V4's expert_dtype "fp4"
  // beside its block-FP8 linears. Null: the experts are linear weights like the others.
  const ExpertFormat* expert_format = nullptr;
  // The checkpoint stores the routed experts fused, one 3-D tensor for all of them (Qwen3.5-MoE's
  // mlp.experts.gate_up_proj [E, 2I, H] and down_proj [E, H, I], as transformers holds them), where the
  // family also reads them one expert a tensor (Family::stacked_experts_tensor). Set by the planner
  // from the checkpoint's names, not from config.json.
  bool stacked_experts = false;
  // DeepSeek-V4 (src/model/arch/deepseek_v4.cc): the grouped output projection (o_groups groups of
  // o_lora_rank), hyper-connections of hc_mult streams, each layer's KV compression ratio (0: none; 4:
  // a compressor of overlapping windows and the indexer; other: a compressor alone), the first
  // hash_layers MoE layers routed by a token-id table of hash_topk experts a token, and the router's
  // score bias (topk_method noaux_tc) in the others.
  uint64_t o_groups = 0;
  uint64_t o_lora_rank = 0;
  uint64_t hc_mult = 0;
  std::vector<uint64_t> compress_ratio;  // per decoder layer; empty for the families without it
  int hash_layers = 0;
  uint64_t hash_topk = 0;
  bool score_bias = false;
  // Block FP8 whose scale grids the checkpoint names "X.<block_scale_suffix>" (DeepSeek-V4: "scale";
  // empty: the format's weight_scale_inv) and stores as block_scale_dtype (F8_E8M0: ue8m0 exponents,
  // kept as bytes, as vLLM holds them; nullopt: float32).
  std::string block_scale_suffix;
  std::optional<DType> block_scale_dtype;
  // Qwen3-Next's gated DeltaNet linear attention, in the layers linear_layer marks (the others have
  // full attention): linear_key_heads x linear_key_head_dim queries and keys, linear_value_heads x
  // linear_value_head_dim values and output gates, a depthwise causal conv of linear_conv_kernel taps.
  uint64_t linear_key_heads = 0;
  uint64_t linear_value_heads = 0;
  uint64_t linear_key_head_dim = 0;
  uint64_t linear_value_head_dim = 0;
  uint64_t linear_conv_kernel = 0;
  std::vector<bool> linear_layer;  // per decoder layer; all false for the families without it
  // Gemma 4: the full-attention layers (global_layer) with their own head_dim and KV heads, K reused
  // as V in them (k_eq_v); the layers from first_kv_shared_layer on read an earlier layer's KV cache
  // (a query projection only) and, with double_wide_mlp, have a dense MLP twice as wide; per-layer
  // embeddings (PLE) of per_layer_hidden a layer from a table of per_layer_vocab rows.
  std::vector<bool> global_layer;  // per decoder layer; all false for the families without it
  uint64_t global_head_dim = 0;
  uint64_t global_kv_heads = 0;
  bool k_eq_v = false;
  int first_kv_shared_layer = 0;  // layers for none
  bool double_wide_mlp = false;
  uint64_t per_layer_hidden = 0;
  uint64_t per_layer_vocab = 0;

  // FP8 (quantization_config).
  Quantization quantization = Quantization::kNone;
  bool static_activations = false;  // activation_scheme "static": input_scale tensors
  uint64_t block_rows = 0;          // weight_block_size, block FP8 only
  uint64_t block_cols = 0;
  // compressed-tensors: tensor is kFp8, block is kFp8Block, channel is kFp8Block with 1 x kWholeRow
  // blocks; the modules quantized are those a config group targets and `ignore` does not name.
  // ModelOpt: quant_ignore holds its exclude_modules (wildcards), quant_targets nothing.
  QuantFormat quant_format = QuantFormat::kFp8;
  WeightStrategy weight_strategy = WeightStrategy::kTensor;
  std::vector<std::string> quant_targets;
  std::vector<std::string> quant_ignore;
  // Integer weights (kWna16): bits per value (4 or 8), inputs per scale (group_size; kWholeRow for
  // channel), and whether each group has a zero point (asymmetric).
  uint32_t weight_bits = 0;
  uint64_t group_size = 0;
  bool zero_points = false;
  // Whether the checkpoint quantizes linear module `module` (e.g. model.layers.0.mlp.down_proj):
  // always for the "fp8" format; by targets and ignore for compressed-tensors; unless exclude_modules
  // names it for ModelOpt.
  bool module_quantized(std::string_view module) const;

  bool is_moe() const { return experts > 0; }
  // Multi-head latent attention: one latent KV for all heads, so no kv head is split.
  bool is_mla() const { return kv_lora_rank > 0; }
  int moe_layer_count() const;

  // Throws Error(kConfig) naming the field for a missing or malformed one, or an unknown architecture.
  static ModelConfig from_json(const nlohmann::json& config);
};

// The quantization an export's shardload.json names: "compressed-tensors" for that format (with
// weight_strategy and activation_scheme beside it), else quantization_name(loaded).
std::string_view quantization_label(const ModelConfig& model, Quantization loaded);
// Sets out["quantization"] to that label and, for compressed-tensors, out["weight_strategy"] and
// out["activation_scheme"]: the fields shardload.json and the plan JSON both carry.
void add_quantization_fields(nlohmann::json& out, const ModelConfig& model, Quantization loaded);

}  // namespace shardload
