#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/dtype.h"
#include "shardload/tensor.h"

namespace shardload::tiny {

enum class Family {
  kLlama,
  kQwen2,
  kQwen3,
  kQwen2Moe,
  kQwen3Moe,
  kMixtral,
  kDeepseekV2,
  kDeepseekV3,
  kErnie45Moe,
};

inline constexpr Family kAllFamilies[] = {
    Family::kLlama,      Family::kQwen2,      Family::kQwen3,
    Family::kQwen2Moe,   Family::kQwen3Moe,   Family::kMixtral,
    Family::kDeepseekV2, Family::kDeepseekV3, Family::kErnie45Moe,
};

// The weight format of the checkpoint (--quant): bf16 throughout, FP8 projections with a float32
// scale per tensor (AutoFP8 / vLLM "fp8"), or with a float32 scale per 128x128 block (DeepSeek-V3).
enum class Quant { kNone, kFp8, kFp8Block };

// The --arch spelling, which is also config.json's model_type.
std::string_view family_name(Family family);
std::optional<Family> parse_family(std::string_view name);

// Every dimension and count of a generated model; the config.json fields and the tensor shapes both
// come from here, so they cannot disagree. Zero means "the family has no such thing".
struct TinyModel {
  Family family = Family::kLlama;
  uint64_t hidden = 0;
  uint64_t intermediate = 0;  // dense MLP (Mixtral: every expert)
  uint64_t heads = 0;
  uint64_t kv_heads = 0;
  uint64_t head_dim = 0;
  uint64_t vocab = 0;
  int layers = 0;
  bool tie_embeddings = false;

  uint64_t experts = 0;
  uint64_t experts_per_token = 0;
  uint64_t moe_intermediate = 0;
  uint64_t shared_intermediate = 0;  // Qwen2-MoE's single shared expert
  uint64_t shared_experts = 0;  // DeepSeek / ERNIE: shared MLP of shared_experts * moe_intermediate
  int first_moe_layer = 0;      // DeepSeek first_k_dense_replace, ERNIE moe_layer_start_index
  int sparse_step = 1;          // Qwen decoder_sparse_step, DeepSeek moe_layer_freq, ERNIE interval
  std::vector<int> mlp_only_layers;  // Qwen-MoE

  // DeepSeek multi-head latent attention.
  uint64_t q_lora_rank = 0;  // 0: q_proj (V2-Lite)
  uint64_t kv_lora_rank = 0;
  uint64_t qk_nope_head_dim = 0;
  uint64_t qk_rope_head_dim = 0;
  uint64_t v_head_dim = 0;
  uint64_t n_group = 1;
  uint64_t topk_group = 1;

  int mtp_layers = 0;  // DeepSeek-V3 num_nextn_predict_layers, ERNIE's mtp_* tensors

  Quant quant = Quant::kNone;
  bool static_activations = true;  // kFp8: input_scale tensors and activation_scheme "static"
};

// The family's small default: every tp in {1,2,4,8} and ep in {1,2,4} is a legal layout.
TinyModel default_model(Family family);

// The family's small default for block FP8 (tiny_block_defaults.cc): every TP split of every
// projection, for tp in {1,2,4} and ep in {1,2,4}, falls on a multiple of 128.
TinyModel block_fp8_model(Family family);

// --layers / --experts (-1 keeps the default). Throws Error(kInvalidArgument) for other bad values.
void apply_counts(TinyModel& model, int layers, int experts);

// Grows hidden and intermediate sizes (keeping every divisibility rule) until the tensor bytes come
// to about target_bytes.
void scale_to_size(TinyModel& model, uint64_t target_bytes);

// Whether decoder layer i has routed experts, by the family's own config rule.
bool is_moe_layer(const TinyModel& model, int layer);

// How a tensor's values are drawn: weights small around 0, norms around 1; FP8 weight scales from
// the values of their weight, input scales from their name (tiny_quant.h).
enum class ValueKind { kWeight, kNorm, kBias, kWeightScale, kInputScale };

struct TensorSpec {
  std::string name;
  DType dtype = DType::kBF16;
  Shape shape;
  ValueKind kind = ValueKind::kWeight;
  // Not kNone for an FP8 weight (dtype F8_E4M3) and its scale tensors: the format they are in. The
  // weight's codes and scales both derive from the bf16 values the weight would otherwise have.
  Quant quant = Quant::kNone;
  Shape weight_shape = {};  // kWeightScale: the shape of the weight it scales
};

// Every checkpoint tensor, in the order Hugging Face writes them (embeddings, layers, norm, head,
// MTP).
std::vector<TensorSpec> model_tensors(const TinyModel& model);
uint64_t total_bytes(const TinyModel& model);

}  // namespace shardload::tiny
