#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/arch/family.h"
#include "shardload/dtype.h"
#include "shardload/tensor.h"

namespace shardload::tiny {

// The weight format of the checkpoint (--quant): bf16 throughout, FP8 projections with a float32
// scale per tensor (AutoFP8 / vLLM "fp8"), or with a float32 scale per 128x128 block (DeepSeek-V3).
// The "fp8" format's per-tensor and 128-block FP8, and llm-compressor's compressed-tensors FP8 by
// weight strategy (per tensor, per output row, per 128-block).
// kMxfp4: gpt-oss's experts as the Hub stores them (the family writes them; no FP8 anywhere).
// llm-compressor's pack-quantized integer weights: int4 in 32-value groups, symmetric (W4A16, Kimi-K2.5's
// experts' scheme) or with zero points (W4A16_ASYM), and int8 per channel (W8A16); its int-quantized
// W8A8 int8 (int8 weights as they are, a scale per row, activations quantized per token at run time); its
// nvfp4-pack-quantized NVFP4 (FP4 weights, an FP8 scale per 16 inputs, float32 global scales).
// kGptq: GPTQ's int4 (AutoGPTQ / GPTQModel v1 format), symmetric in 32-value groups, input-major;
// kGptqChannel: the same with one group per column (group_size -1). kAwq: AWQ's GEMM int4 (AutoAWQ), with
// zero points in 32-value groups, input-major and packed along the outputs. kModeloptNvfp4: NVIDIA ModelOpt's
// NVFP4 (compressed-tensors' bytes and group scales under ModelOpt's names, the reciprocal global scales).
enum class Quant {
  kNone, kFp8, kFp8Block, kCtTensor, kCtChannel, kCtBlock, kMxfp4, kCtW4a16, kCtW4a16Asym, kCtW8a16, kCtW8a8,
  kCtNvfp4, kGptq, kGptqChannel, kAwq, kModeloptNvfp4
};
inline bool is_gptq(Quant q) { return q == Quant::kGptq || q == Quant::kGptqChannel; }
// 128 x 128 blocks: the geometry every tp split must respect.
inline bool is_block_quant(Quant q) { return q == Quant::kFp8Block || q == Quant::kCtBlock; }
inline bool is_packed_int(Quant q) {
  return q == Quant::kCtW4a16 || q == Quant::kCtW4a16Asym || q == Quant::kCtW8a16;
}
inline bool is_compressed_tensors(Quant q) {
  return q == Quant::kCtTensor || q == Quant::kCtChannel || q == Quant::kCtBlock || is_packed_int(q) ||
         q == Quant::kCtW8a8 || q == Quant::kCtNvfp4;
}
// Inputs per scale of make-tiny's int4 weights (Kimi-K2.5's group size): every TP split of its models
// falls on whole groups at tp 4.
inline constexpr uint64_t kTinyIntGroup = 32;

// Far above any real model (DeepSeek-V3: 61 layers x 256 experts; Kimi-K2: 61 x 384), low enough
// that the tensor list (and the MoE-layer fit, quadratic in the layers) stays small, and a typo
// is caught before it fills a disk: the most layers --layers or a config.json may ask for.
inline constexpr int kMaxTinyLayers = 4096;

// Every dimension and count of a generated model (arch::TinySizes), its family and its weight
// format; the config.json fields and the tensor shapes both come from here, so they cannot disagree.
struct TinyModel : arch::TinySizes {
  const arch::Family* family = nullptr;
  Quant quant = Quant::kNone;
  bool static_activations = true;  // kFp8: input_scale tensors and activation_scheme "static"
  // --config of a multimodal class: where its checkpoint names the text model (ModelConfig's).
  std::string weight_prefix;
};

// The family's small default: every tp in {1,2,4,8} and ep in {1,2,4} is a legal layout.
TinyModel default_model(const arch::Family& family);

// The family's small default for block FP8 (tiny_block_defaults.cc): every TP split of every
// projection, for tp in {1,2,4} and ep in {1,2,4}, falls on a multiple of 128.
TinyModel block_fp8_model(const arch::Family& family);

// --layers / --experts (-1 keeps the default). Throws Error(kInvalidArgument) for other bad values.
void apply_counts(TinyModel& model, int layers, int experts);

// Grows hidden and intermediate sizes (keeping every divisibility rule) until the tensor bytes come
// to about target_bytes.
void scale_to_size(TinyModel& model, uint64_t target_bytes);

// Whether decoder layer i has routed experts, by the family's own config rule.
bool is_moe_layer(const TinyModel& model, int layer);

// How a tensor's values are drawn: weights small around 0, norms around 1; FP8 weight scales from
// the values of their weight, input scales from their name (tiny_quant.h).
// Packed integer weights come with zero points and their [N, K] (kZeroPoint, kWeightShape); NVFP4 weights
// with a global scale (kGlobalScale); GPTQ's with each input's group (kGroupIndex, g_idx).
enum class ValueKind {
  kWeight, kNorm, kBias, kWeightScale, kInputScale, kMxfp4Codes, kMxfp4Scales, kZeroPoint, kWeightShape,
  kGlobalScale, kGroupIndex,
  kIndices,  // int32 expert ids (DeepSeek-V4's hash-routing table): 0 .. 3, valid for any expert count >= 4
};

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
