// What an engine's sharded_state loader expects of a rank file, as table data: the engine loads a
// file only when its names are exactly those of its model's state dict (with tensors that share
// storage reduced to one name, the smaller), every one of them present. The rows below are what
// vLLM 0.33 and SGLang 0.5.23 models hold on CPU for each family (tests/engines/ compares them).
#include "export/engine_tensors.h"

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "core/shape_text.h"
#include "shardload/error.h"
#include "shardload/model.h"

namespace shardload {
namespace {

// The first rename whose `from` a name contains replaces that part of it.
struct Rename {
  std::string_view from;
  std::string_view to;
};

// The checkpoint KV-cache slots an attention module holds under a quantization config, at their
// initial value until a checkpoint fills them (make-tiny's and most FP8 checkpoints do not). Under
// quant_method fp8: vLLM's four scalars at -1 (unset) in the model dtype, SGLang's two in float32.
// Under compressed-tensors (vLLM): q/k/v scales F32 [1] at 1 and their zero points [1] at 0, made
// in the model dtype (the default dtype while vLLM builds its model).
struct KvCacheSlot {
  std::string_view name;
  bool model_dtype = false;  // else float32
  bool one_element = false;  // [1], else a scalar
  float value = 0;
};
constexpr float kUnsetKvCacheScale = -1.0f;
constexpr KvCacheSlot kVllmKvSlots[] = {{"k_scale", true, false, kUnsetKvCacheScale},
                                        {"v_scale", true, false, kUnsetKvCacheScale},
                                        {"q_scale", true, false, kUnsetKvCacheScale},
                                        {"prob_scale", true, false, kUnsetKvCacheScale}};
constexpr KvCacheSlot kVllmCtKvSlots[] = {
    {"k_scale", false, true, 1.0f},     {"v_scale", false, true, 1.0f},
    {"q_scale", false, true, 1.0f},     {"k_zero_point", true, true, 0.0f},
    {"v_zero_point", true, true, 0.0f}, {"q_zero_point", true, true, 0.0f}};
constexpr KvCacheSlot kSglangKvSlots[] = {{"k_scale", false, false, kUnsetKvCacheScale},
                                          {"v_scale", false, false, kUnsetKvCacheScale}};
// SGLang's post-processing of KV-cache slots a checkpoint left unset (both at -1): 1.
constexpr float kPostProcessedKvCacheScale = 1.0f;

// A parameter whose name ends with `after` comes with the buffers of an attention module: its name
// with `after` replaced by `module` + each buffer's name.
struct Buffers {
  std::string_view after;
  std::string_view module;
  bool attention_scales = false;               // vLLM's kAttentionScales, whatever the dtype
  std::span<const KvCacheSlot> kv_cache{};     // under an FP8 (quant_method fp8) config
  std::span<const KvCacheSlot> kv_cache_ct{};  // under a compressed-tensors config
  // Under a ModelOpt config, whose KV-cache method vLLM 0.33 gives MLA attention too (Attention and
  // MLAAttention: ModelOptQuantConfigBase.get_quant_method).
  std::span<const KvCacheSlot> kv_cache_modelopt{};
};

// vLLM's Attention modules register these float32 scalars (initialised to 1) whatever the dtype.
constexpr std::string_view kAttentionScales[] = {"_k_scale", "_v_scale", "_q_scale", "_prob_scale"};

// vLLM and SGLang give a fused FP8 layer one weight (and input) scale per part. A shardload rank
// holds the layer requantized once (in float32) to one scale, which goes into every part's slot: each
// branch of the engines' post-processing then holds the rank's weights. The branches that requantize
// the parts to their maximum (vLLM; SGLang on CPU, ROCm and without cutlass) requantize each part
// from that scale to the same one, a round trip through float16 that keeps the codes
// (tests/engines/); the ones that spread each part's scale over its rows (SGLang's cutlass and
// Marlin kernels, vLLM's Marlin) spread the same scale. Not the engines' mark of a layer fused on disk (the lowest float32 after the
// first scale), which only the requantizing branches read: the spreading ones would give the second
// and third parts' rows that value as their scale.

// A quantized checkpoint format, as a bit of EngineFamily::fp8: quant_method fp8 with static per-tensor
// or block scales, llm-compressor's compressed-tensors FP8 by weight strategy, or its pack-quantized
// integer weights (W4A16, W8A16: every strategy, the rank tensors being the loaders' own) or its int8
// weights (int-quantized W8A8) or its FP4 weights (nvfp4-pack-quantized), GPTQ, AWQ, or NVIDIA ModelOpt's
// NVFP4.
enum Fp8Format : unsigned {
  kFp8Tensor = 1u << 0,
  kFp8Block = 1u << 1,
  kCtTensor = 1u << 2,
  kCtChannel = 1u << 3,
  kCtBlock = 1u << 4,
  kCtPacked = 1u << 5,
  kCtInt8 = 1u << 6,
  kCtNvfp4 = 1u << 7,
  kGptq = 1u << 8,
  kAwq = 1u << 9,
  kModeloptNvfp4 = 1u << 10,
};
constexpr unsigned kEveryFp8Format = kFp8Tensor | kFp8Block | kCtTensor | kCtChannel | kCtBlock;
constexpr std::pair<Fp8Format, std::string_view> kFp8FormatNames[] = {
    {kFp8Tensor, "fp8 (static per-tensor)"},  {kFp8Block, "fp8-block"},
    {kCtTensor, "compressed-tensors tensor"}, {kCtChannel, "compressed-tensors channel"},
    {kCtBlock, "compressed-tensors block"},   {kCtPacked, "compressed-tensors pack-quantized"},
    {kCtInt8, "compressed-tensors int-quantized"}, {kCtNvfp4, "compressed-tensors nvfp4-pack-quantized"},
    {kGptq, "gptq"}, {kAwq, "awq"}, {kModeloptNvfp4, "modelopt nvfp4"},
};
// vLLM's families checked with every FP8 format and llm-compressor's integer weights (tests/engines).
// ModelOpt NVFP4: llama, qwen3_moe and deepseek_v3 in tests/engines/test_vllm.py, the others by hand.
constexpr unsigned kVllmEveryFormat =
    kEveryFp8Format | kCtPacked | kCtInt8 | kCtNvfp4 | kGptq | kAwq | kModeloptNvfp4;

// A tensor the engine holds in another dtype than docs/layout.md (the q/k norms aside, is_qk_norm):
// `to`, or the model dtype; `leading_one`: with a leading dimension of one ([E] as [1, E]).
struct DtypeRule {
  std::string_view suffix;
  DType to = DType::kF32;
  bool model_dtype = false;
  bool leading_one = false;
};

// Two planned parameters the engine holds as one tensor `name` (in the same module), `first`'s
// rows then `second`'s.
struct FusedRows {
  std::string_view first;
  std::string_view second;
  std::string_view name;
};

struct EngineFamily {
  Engine engine;
  std::string_view family;
  std::span<const Rename> renames{};
  std::span<const Buffers> buffers{};
  // The engine's model makes every decoder layer an MoE layer, whatever the config says of dense
  // ones (mlp_only_layers, decoder_sparse_step): a checkpoint with dense layers does not load into
  // it (its own loader leaves those layers' experts unset).
  bool every_layer_moe = false;
  // The FP8 formats checked against the engine (tests/engines/), a set of Fp8Format bits. SGLang:
  // its DeepSeek holds its fused q_a / kv_a projection with one per-tensor scale before its
  // post-processing, not one per part (its own load of a compressed-tensors one fails), and its
  // post_load_weights fails on per-channel kv_b_proj scales on CPU; its other families leave a
  // quant_method fp8 block checkpoint's weight_scale_inv unloaded (at their initial value) in its own
  // load.
  unsigned fp8 = kEveryFp8Format;
  std::span<const DtypeRule> dtypes{};
  std::span<const FusedRows> fused{};
  // The engine's attention takes num_key_value_heads / tp KV heads a rank, without replicating them
  // (vLLM 0.33's gpt-oss): above tp = KV heads it builds an attention with none.
  bool kv_heads_not_replicated = false;
  // Names that depend on the model (after the renames): vLLM's Gemma 4 holds some layers elsewhere.
  std::string (*model_names)(std::string name, const ModelConfig& m) = nullptr;
};

// With tied word embeddings, the engine's lm_head holds the embedding table itself: one tensor
// under two names, of which the state dict keeps the smaller.
constexpr Rename kTiedEmbedding{"model.embed_tokens.weight", "lm_head.weight"};

constexpr Buffers kVllmAttention[] = {
    {"self_attn.qkv_proj.weight", "self_attn.attn.", true, kVllmKvSlots, kVllmCtKvSlots, kVllmKvSlots}};
// vLLM's MLA wraps the attention in mla_attn (itself holding an Attention as mla_attn); q_b_proj,
// o_proj and q_a_layernorm are reachable through both, and "mla_attn..." is the smaller name.
constexpr Buffers kVllmMla[] = {
    {"self_attn.kv_b_proj.weight", "self_attn.mla_attn.mla_attn.", true, {}, {}, kVllmKvSlots}};

// vLLM's fused MoE layer holds the router (gate) and, since 0.33, its routed experts in a child
// routed_experts; both are reachable from the MLP too, and "experts..." is the smaller name.
constexpr Rename kVllmMoe[] = {
    {".mlp.experts.w13_", ".mlp.experts.routed_experts.w13_"},
    {".mlp.experts.w2_", ".mlp.experts.routed_experts.w2_"},
    {".mlp.gate.", ".mlp.experts.gate."},
};
constexpr Rename kVllmDeepseek[] = {
    {".mlp.experts.w13_", ".mlp.experts.routed_experts.w13_"},
    {".mlp.experts.w2_", ".mlp.experts.routed_experts.w2_"},
    {".mlp.gate.", ".mlp.experts.gate."},
    {".mlp.shared_experts.", ".mlp.experts._shared_experts._layer."},
    {".self_attn.o_proj.", ".self_attn.mla_attn.o_proj."},
    {".self_attn.q_b_proj.", ".self_attn.mla_attn.q_b_proj."},
    {".self_attn.q_a_layernorm.", ".self_attn.mla_attn.q_a_layernorm."},
    {".self_attn.q_proj.", ".self_attn.mla_attn.q_proj."},  // DeepSeek-V2-Lite: no q_lora_rank
};
// DeepSeek-V4's MoE layer is `ffn.`, its router's score bias and hash table with the router.
constexpr Rename kVllmDeepseekV4[] = {
    {".ffn.experts.w13_", ".ffn.experts.routed_experts.w13_"},
    {".ffn.experts.w2_", ".ffn.experts.routed_experts.w2_"},
    {".ffn.gate.", ".ffn.experts.gate."},
    {".ffn.shared_experts.", ".ffn.experts._shared_experts._layer."},
};
// Mixtral's router stays where it is; Qwen2-MoE's too, while its shared expert (with its gate)
// moves into the fused MoE layer.
constexpr Rename kVllmMixtral[] = {
    {".block_sparse_moe.experts.w13_", ".block_sparse_moe.experts.routed_experts.w13_"},
    {".block_sparse_moe.experts.w2_", ".block_sparse_moe.experts.routed_experts.w2_"},
};
constexpr Rename kVllmQwen2Moe[] = {
    {".mlp.experts.w13_", ".mlp.experts.routed_experts.w13_"},
    {".mlp.experts.w2_", ".mlp.experts.routed_experts.w2_"},
    {".mlp.shared_expert_gate.", ".mlp.experts._shared_experts._layer.expert_gate."},
    {".mlp.shared_expert.", ".mlp.experts._shared_experts._layer."},
};

// gpt-oss: vLLM's names for the embedding ("embedding") and the attention ("attn"), whose Attention
// module (with its scales) is attn.attn.
constexpr Rename kVllmGptOss[] = {
    {".self_attn.", ".attn."},
    {"model.embed_tokens.", "model.embedding."},
    {".mlp.experts.w13_", ".mlp.experts.routed_experts.w13_"},
    {".mlp.experts.w2_", ".mlp.experts.routed_experts.w2_"},
};
constexpr Buffers kVllmGptOssAttention[] = {{"self_attn.qkv_proj.weight", "attn.attn.", true}};
// Qwen3-Next: Qwen2-MoE's shared expert and gate, and Qwen3-MoE's router inside the fused MoE layer.
constexpr Rename kVllmQwen3Next[] = {
    {".mlp.experts.w13_", ".mlp.experts.routed_experts.w13_"},
    {".mlp.experts.w2_", ".mlp.experts.routed_experts.w2_"},
    {".mlp.shared_expert_gate.", ".mlp.experts._shared_experts._layer.expert_gate."},
    {".mlp.shared_expert.", ".mlp.experts._shared_experts._layer."},
    {".mlp.gate.", ".mlp.experts.gate."},
};
// Llama-4: the MoE layer is feed_forward; its router stays where it is.
constexpr Rename kVllmLlama4[] = {
    {".feed_forward.experts.w13_", ".feed_forward.experts.routed_experts.w13_"},
    {".feed_forward.experts.w2_", ".feed_forward.experts.routed_experts.w2_"},
    {".feed_forward.shared_expert.", ".feed_forward.experts._shared_experts._layer."},
};
// GLM-4-MoE and ERNIE-4.5-MoE: the router's weight stays in the MLP, its score-correction bias goes
// with the routed experts.
constexpr Rename kVllmRoutedBias[] = {
    {".mlp.experts.w13_", ".mlp.experts.routed_experts.w13_"},
    {".mlp.experts.w2_", ".mlp.experts.routed_experts.w2_"},
    {".mlp.gate.e_score_correction_bias", ".mlp.experts.routed_experts.e_score_correction_bias"},
    {".mlp.shared_experts.", ".mlp.experts._shared_experts._layer."},
};
// GLM-4.7-Flash: DeepSeek's latent attention (mla_attn) around GLM-4-MoE's MoE layer (its router in
// the MLP, the score-correction bias and shared experts with the routed experts).
constexpr Rename kVllmGlm4MoeLite[] = {
    {".mlp.experts.w13_", ".mlp.experts.routed_experts.w13_"},
    {".mlp.experts.w2_", ".mlp.experts.routed_experts.w2_"},
    {".mlp.gate.e_score_correction_bias", ".mlp.experts.routed_experts.e_score_correction_bias"},
    {".mlp.shared_experts.", ".mlp.experts._shared_experts._layer."},
    {".self_attn.o_proj.", ".self_attn.mla_attn.o_proj."},
    {".self_attn.q_b_proj.", ".self_attn.mla_attn.q_b_proj."},
    {".self_attn.q_a_layernorm.", ".self_attn.mla_attn.q_a_layernorm."},
    {".self_attn.q_proj.", ".self_attn.mla_attn.q_proj."},
};
// Gemma 4: the routed experts in the fused MoE layer's child (the router is a module of its own, beside
// it); a layer that reads an earlier layer's KV cache holds q_proj alone beside its Attention module.
constexpr Rename kVllmGemma4[] = {
    {".experts.w13_", ".experts.routed_experts.w13_"},
    {".experts.w2_", ".experts.routed_experts.w2_"},
};
// vLLM 0.33's Gemma 4 splits its layers for You-Only-Cache-Once prefill: the layers that read an earlier
// layer's KV cache (num_kv_shared_layers) are reachable as model.layers.N and as
// model.cross_decoder.decoder_layers.(N - first shared), the others as model.self_decoder.decoder_layers.N
// too; a state dict keeps the smaller name, cross_decoder's for the first, layers' for the others.
std::string vllm_gemma4_cross_decoder(std::string name, const ModelConfig& m) {
  constexpr std::string_view kLayers = "layers.";
  size_t at = name.find(kLayers);
  while (at != std::string::npos && at > 0 && name[at - 1] != '.') at = name.find(kLayers, at + 1);
  if (at == std::string::npos) return name;
  const size_t digits = at + kLayers.size();
  size_t end = digits;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  if (end == digits || end - digits > 6 || end >= name.size() || name[end] != '.') return name;
  const int layer = std::stoi(name.substr(digits, end - digits));
  if (layer < m.first_kv_shared_layer) return name;
  return name.substr(0, at) +
         fmt::format("cross_decoder.decoder_layers.{}", layer - m.first_kv_shared_layer) + name.substr(end);
}
constexpr Buffers kVllmGemma4Attention[] = {{"self_attn.qkv_proj.weight", "self_attn.attn.", true},
                                            {"self_attn.q_proj.weight", "self_attn.attn.", true}};
// vLLM and SGLang build GLM-4-MoE's router in float32 (ERNIE's is float32 in docs/layout.md already).
constexpr DtypeRule kGlm4MoeRouter[] = {{"mlp.gate.weight", DType::kF32}};
// DeepSeek-V3.2's indexer: vLLM builds its k_norm (a LayerNorm) in float32 and holds wk and
// weights_proj as one replicated weight.
constexpr DtypeRule kVllmDeepseekV32Dtypes[] = {{"self_attn.indexer.k_norm.weight", DType::kF32},
                                                {"self_attn.indexer.k_norm.bias", DType::kF32}};
constexpr FusedRows kVllmDeepseekV32Fused[] = {{"self_attn.indexer.wk.weight",
                                                "self_attn.indexer.weights_proj.weight",
                                                "self_attn.indexer.wk_weights_proj.weight"}};

// SGLang's attention modules hold buffers only under an FP8 config (its KV-cache slots); its Qwen3
// attention none.
constexpr Buffers kSglangAttention[] = {{"self_attn.qkv_proj.weight", "self_attn.attn.", false, kSglangKvSlots}};

// SGLang's MLA: two attention modules (its MHA and MQA paths), each with the KV-cache slots.
constexpr Buffers kSglangMla[] = {{"self_attn.kv_b_proj.weight", "self_attn.attn_mha.", false, kSglangKvSlots},
                                  {"self_attn.kv_b_proj.weight", "self_attn.attn_mqa.", false, kSglangKvSlots}};

// SGLang keeps docs/layout.md's names but one: DeepSeek's fused q_a / kv_a projection, named after
// both its parts.
constexpr Rename kSglangDeepseek[] = {
    {".self_attn.fused_qkv_a_proj.", ".self_attn.fused_qkv_a_proj_with_mqa."},
};

// SGLang's ERNIE-4.5 router: weight and score-correction bias in the model dtype, the bias [1, E]
// as the checkpoint's moe_statics.
constexpr DtypeRule kSglangErnieRouter[] = {
    {"mlp.gate.weight", DType::kF32, /*model_dtype=*/true},
    {"mlp.gate.e_score_correction_bias", DType::kF32, /*model_dtype=*/true, /*leading_one=*/true}};

constexpr unsigned kSglangFp8 = kEveryFp8Format & ~kFp8Block;
// W8A8 int8, NVFP4 and AWQ (float16 only, as SGLang takes it): SGLang 0.5.23 holds them, before its
// post-processing, as vLLM does (measured on llama: docs/engines.md); its hooks fill them as loaded, its
// sharded_state would read them post-processed.
constexpr unsigned kSglangLlama = kSglangFp8 | kCtInt8 | kCtNvfp4 | kAwq;
constexpr EngineFamily kEngineFamilies[] = {
    {Engine::kVllm, "llama", {}, kVllmAttention, false, kVllmEveryFormat},
    {Engine::kVllm, "qwen2", {}, kVllmAttention},  // its tiny MLP (352) splits no 32-group at tp 2: W4A16 unchecked
    {Engine::kVllm, "qwen3", {}, kVllmAttention, false, kVllmEveryFormat},
    {Engine::kVllm, "mixtral", kVllmMixtral, kVllmAttention, false, kVllmEveryFormat},
    {Engine::kVllm, "qwen2_moe", kVllmQwen2Moe, kVllmAttention, false, kVllmEveryFormat},
    {Engine::kVllm, "qwen3_moe", kVllmMoe, kVllmAttention, false, kVllmEveryFormat},
    {Engine::kVllm, "deepseek_v2", kVllmDeepseek, kVllmMla, false, kVllmEveryFormat},
    {Engine::kVllm, "deepseek_v3", kVllmDeepseek, kVllmMla, false, kVllmEveryFormat},
    // FP8 and compressed-tensors of these families are not checked against vLLM yet.
    {Engine::kVllm, "gpt_oss", kVllmGptOss, kVllmGptOssAttention, false, 0, {}, {},
     /*kv_heads_not_replicated=*/true},
    {Engine::kVllm, "qwen3_next", kVllmQwen3Next, kVllmAttention, false, 0},
    {Engine::kVllm, "llama4", kVllmLlama4, kVllmAttention, false, 0},
    {Engine::kVllm, "minimax_m2", kVllmMixtral, kVllmAttention, false, 0},
    {Engine::kVllm, "deepseek_v32", kVllmDeepseek, kVllmMla, false, 0, kVllmDeepseekV32Dtypes,
     kVllmDeepseekV32Fused},
    {Engine::kVllm, "glm4_moe", kVllmRoutedBias, kVllmAttention, false, 0, kGlm4MoeRouter},
    {Engine::kVllm, "ernie4_5_moe", kVllmRoutedBias, kVllmAttention, false, 0},
    // GLM-5 is DeepSeek-V3.2's model in vLLM (its router weight in the model dtype, float32 logits).
    {Engine::kVllm, "glm4_moe_lite", kVllmGlm4MoeLite, kVllmMla, false, 0, kGlm4MoeRouter},
    {Engine::kVllm, "glm_moe_dsa", kVllmDeepseek, kVllmMla, false, 0, kVllmDeepseekV32Dtypes,
     kVllmDeepseekV32Fused},
    // Qwen3.5: Qwen3-Next's modules (its separately stored projections are held fused, as planned);
    // block FP8 checked too (in_proj_ba unquantized, as the checkpoints leave it).
    {Engine::kVllm, "qwen3_5", {}, kVllmAttention, false, kFp8Block | kGptq},
    {Engine::kVllm, "qwen3_5_moe", kVllmQwen3Next, kVllmAttention, false, kFp8Block | kGptq},
    // Gemma 4, dense and MoE: every tensor in the model dtype (its norms, router and scales too).
    {Engine::kVllm, "gemma4", kVllmGemma4, kVllmGemma4Attention, false, 0, {}, {}, false,
     vllm_gemma4_cross_decoder},
    // Kimi-K2.5: DeepSeek-V3's modules under language_model. (the vision tower not built: tests/engines
    // passes limit_mm_per_prompt 0); its int4 routed experts checked, FP8 formats not.
    {Engine::kVllm, "kimi_k25", kVllmDeepseek, kVllmMla, false, kCtPacked},
    // DeepSeek-V4: its MoE layer (ffn.) holds the router and shared experts as DeepSeek-V3's does; no
    // attention buffers on CPU. The Hub's format (block FP8 with ue8m0 scales, MXFP4 experts) checked.
    {Engine::kVllm, "deepseek_v4", kVllmDeepseekV4, {}, false, kFp8Block},
    {Engine::kSglang, "llama", {}, kSglangAttention, false, kSglangLlama},
    {Engine::kSglang, "qwen2", {}, kSglangAttention, false, kSglangFp8},
    {Engine::kSglang, "qwen3", {}, {}, false, kSglangFp8},  // no KV-cache slots
    {Engine::kSglang, "mixtral", {}, kSglangAttention, false, kSglangFp8},
    {Engine::kSglang, "qwen2_moe", {}, kSglangAttention, false, kSglangFp8},
    {Engine::kSglang, "qwen3_moe", {}, {}, /*every_layer_moe=*/true, kSglangFp8},
    {Engine::kSglang, "deepseek_v2", kSglangDeepseek, kSglangMla, false, kFp8Block | kCtBlock},
    {Engine::kSglang, "deepseek_v3", kSglangDeepseek, kSglangMla, false, kFp8Block | kCtBlock},
    // Unquantized only (FP8 of these families not checked against SGLang yet): no KV-cache slots.
    {Engine::kSglang, "minimax_m2", {}, {}, false, 0},
    {Engine::kSglang, "glm4_moe", {}, {}, false, 0, kGlm4MoeRouter},
    {Engine::kSglang, "ernie4_5_moe", {}, {}, false, 0, kSglangErnieRouter},
    // SGLang's GLM-4.7-Flash: its DeepSeek names, the router float32.
    {Engine::kSglang, "glm4_moe_lite", kSglangDeepseek, kSglangMla, false, 0, kGlm4MoeRouter},
};

// Families an engine does not take, with the evidence (make-tiny's checkpoints at tp 2 x ep 2, the
// engine's own load on CPU as tests/engines/ runs it; docs/engines.md).
struct FamilyRefusal {
  Engine engine;
  std::string_view family;
  std::string_view why;
};
// Each cause in one place: the families it stops share its words, and the support matrix one note.
// Qwen3-Next and Qwen3.5 (its hybrid layers' Mamba-style cache).
constexpr std::string_view kSglangNoMambaCacheOnCpu =
    "SGLang 0.5.23 cannot build it on CPU (its Mamba cache needs platform support for state "
    "snapshots): not checked";
// DeepSeek-V3.2 and GLM-5 (sglang/srt/arg_groups/model_hook.py names both).
constexpr std::string_view kSglangNeedsNvidiaGpu =
    "SGLang 0.5.23 cannot build it without an NVIDIA GPU (its model-specific server arguments ask "
    "the CUDA device's capability): not checked";
constexpr FamilyRefusal kFamilyRefusals[] = {
    {Engine::kSglang, "gpt_oss",
     "SGLang 0.5.23's own load of it fails with expert parallelism (its fused w2 loader copies every "
     "expert into the rank's) and does not know the Hub's mxfp4 method without its CUDA kernels: "
     "nothing correct to match"},
    {Engine::kSglang, "qwen3_next", kSglangNoMambaCacheOnCpu},
    {Engine::kSglang, "llama4",
     "SGLang 0.5.23 holds Llama-4's q/k rows in the checkpoint's interleaved order, not layout.md's "
     "rotary order, and its experts otherwise: an engine layout of its own, not built yet"},
    {Engine::kSglang, "qwen3_5", kSglangNoMambaCacheOnCpu},
    {Engine::kSglang, "qwen3_5_moe", kSglangNoMambaCacheOnCpu},
    {Engine::kSglang, "deepseek_v32", kSglangNeedsNvidiaGpu},
    {Engine::kSglang, "glm_moe_dsa", kSglangNeedsNvidiaGpu},
    // Measured with sglang_ranks.py on transformers 5.17's random Gemma4ForCausalLM (per_layer_config)
    // and on the same config in the Hub's spelling (global_head_dim), both at tp 2 x ep 2.
    {Engine::kSglang, "gemma4",
     "SGLang 0.5.23 cannot read a Gemma 4 config whose full-attention layers have their own head "
     "size or KV heads (its config parser's hasattr(config, 'num_key_value_heads') raises "
     "transformers 5.20's AmbiguousGlobalPerLayerAttributeError), and its gemma4_causal.py would "
     "build those layers from head_dim and num_key_value_heads (it never reads global_head_dim): "
     "not checked"},
    // Measured with sglang_ranks.py on make-tiny's bf16 kimi_k25 at tp 2 x ep 2 (its own load runs on CPU).
    {Engine::kSglang, "kimi_k25",
     "SGLang 0.5.23's KimiK25ForConditionalGeneration always builds its vision tower and projector (its own "
     "load of a checkpoint without them holds 335 tower tensors of 376 a rank, at their initial values), "
     "which its sharded_state load would ask of every rank file (shardload exports the text model only), "
     "and the Hub's int4 experts are a format --engine sglang refuses: not checked"},
    // Measured with sglang_ranks.py on make-tiny's bf16 deepseek_v4 at tp 2 x ep 2.
    {Engine::kSglang, "deepseek_v4",
     "SGLang 0.5.23's DeepseekV4ForCausalLM.load_weights prewarms its mHC kernels, which asks the CUDA "
     "device's multiprocessor count (its own load fails without an NVIDIA GPU); with that stood in, its own "
     "load holds another layout (attn_sink whole on every rank, not split by head; compressor norms in "
     "float32; its own names: self_attn.wqkv_a, compressor.wkv_gate, mlp., input_layernorm), not built: "
     "not checked"},
};

const EngineFamily* find_engine_family(Engine engine, std::string_view family) {
  for (const EngineFamily& row : kEngineFamilies) {
    if (row.engine == engine && row.family == family) return &row;
  }
  return nullptr;
}

std::string families_of(Engine engine) {
  std::string out;
  for (const EngineFamily& row : kEngineFamilies) {
    if (row.engine != engine) continue;
    if (!out.empty()) out += ", ";
    out += row.family;
  }
  return out.empty() ? "none yet" : out;
}

std::string renamed(const std::string& name, std::span<const Rename> renames) {
  for (const Rename& rename : renames) {
    const size_t at = name.find(rename.from);
    if (at == std::string::npos) continue;
    std::string out = name;
    out.replace(at, rename.from.size(), rename.to);
    return out;
  }
  return name;
}

// q/k norms are float32 in docs/layout.md (FastDeploy's choice); the engines keep the model dtype.
bool is_qk_norm(const std::string& name) {
  return name.ends_with("self_attn.q_norm.weight") || name.ends_with("self_attn.k_norm.weight");
}

[[noreturn]] void refuse(Engine engine, const std::string& what, std::string expected, std::string found) {
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("--engine {} cannot export {}", engine_name(engine), what),
              {.field = "--engine", .expected = std::move(expected), .found = std::move(found)});
}

// The checkpoint's FP8 format; none for FP8 made by shardload (--quantization fp8).
std::optional<Fp8Format> fp8_format(const Plan& plan) {
  if (plan.quantization == Quantization::kWna16) return kCtPacked;
  if (plan.quantization == Quantization::kInt8) return kCtInt8;
  if (plan.quantization == Quantization::kNvfp4) {
    return plan.model.quant_format == QuantFormat::kModelopt ? kModeloptNvfp4 : kCtNvfp4;
  }
  if (plan.quantization == Quantization::kGptq) return kGptq;
  if (plan.quantization == Quantization::kAwq) return kAwq;
  if (plan.model.quant_format == QuantFormat::kCompressedTensors) {
    switch (plan.model.weight_strategy) {
      case WeightStrategy::kTensor:
        return kCtTensor;
      case WeightStrategy::kChannel:
        return kCtChannel;
      case WeightStrategy::kBlock:
        return kCtBlock;
      case WeightStrategy::kGroup:
        return kCtPacked;
    }
  }
  if (plan.quantization == Quantization::kFp8) return kFp8Tensor;
  if (plan.quantization == Quantization::kFp8Block) return kFp8Block;
  return std::nullopt;
}

std::string_view fp8_format_name(Fp8Format format) {
  for (const auto& [bit, name] : kFp8FormatNames) {
    if (bit == format) return name;
  }
  return "?";
}

}  // namespace

std::vector<std::string> engine_names_of(Engine engine, const std::string& layout_name) {
  std::vector<std::string> out{layout_name};
  for (const EngineFamily& row : kEngineFamilies) {
    if (row.engine != engine) continue;
    std::string name = renamed(layout_name, row.renames);
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(std::move(name));
  }
  return out;
}

void check_engine_plan(const Plan& plan, Engine engine, EngineUse use) {
  // Only SGLang's sharded_state loader post-processes the empty model before it reads the files;
  // vLLM's post-processes after, so its export holds the layers as loaded.
  if (use == EngineUse::kExportPostProcessed && engine != Engine::kSglang) {
    throw Error(
        ErrorKind::kInvalidArgument,
        "--engine-post-processed is SGLang's (its sharded_state loader post-processes the empty "
        "model, then reads the files); other engines' exports hold the layers as loaded",
        {.field = "--engine",
         .expected = "sglang",
         .found = engine == Engine::kLayout ? "none" : std::string(engine_name(engine))});
  }
  if (engine == Engine::kLayout || engine == Engine::kFastdeploy) return;
  const std::string family(family_name(plan.model.family));
  const EngineFamily* row = find_engine_family(engine, family);
  if (!row) {
    std::string_view why = "its model's names are not checked yet";
    for (const FamilyRefusal& refusal : kFamilyRefusals) {
      if (refusal.engine == engine && refusal.family == family) why = refusal.why;
    }
    refuse(engine, fmt::format("this family: {}", why), "a family of " + families_of(engine), family);
  }
  const size_t moe_layers = plan.physical_to_logical.size();
  if (row->every_layer_moe && moe_layers != static_cast<size_t>(plan.model.layers)) {
    refuse(engine,
           fmt::format("{} with dense layers: its {} model makes every layer MoE (it reads no "
                       "mlp_only_layers or decoder_sparse_step)",
                       family, engine_name(engine)),
           fmt::format("{} MoE layers", plan.model.layers),
           fmt::format("{} MoE layers of {}", moe_layers, plan.model.layers));
  }
  if (row->kv_heads_not_replicated && static_cast<uint64_t>(plan.parallel.tp) > plan.model.kv_heads) {
    refuse(engine,
           fmt::format("{} at tp {} over {} KV heads: its attention takes num_key_value_heads / tp KV heads "
                       "a rank without replicating them (none here)",
                       family, plan.parallel.tp, plan.model.kv_heads),
           fmt::format("tp of at most {} (the KV heads)", plan.model.kv_heads),
           fmt::format("tp {}", plan.parallel.tp));
  }
  // The engines take a static per-tensor FP8 rank with its merged scale in every fused part's slot,
  // block and channel scales as layout.md cuts them, where the family row says the
  // format was checked. FP8 quantized by shardload is not checked (the engines quantize an unquantized
  // checkpoint in their own post-processing: their parameters before it are not FP8).
  if (plan.quantization != Quantization::kNone) {
    const std::optional<Fp8Format> format = fp8_format(plan);
    if (!format || !(row->fp8 & *format)) {
      std::string taken;
      for (const auto& [bit, name] : kFp8FormatNames) {
        if (row->fp8 & bit) taken += fmt::format("{}{}", taken.empty() ? "" : ", ", name);
      }
      refuse(engine,
             fmt::format("this quantization format of {}: its engine layout is not checked against the engine yet",
                         family),
             taken.empty() ? "an unquantized checkpoint" : "an unquantized checkpoint or " + taken,
             format ? std::string(fp8_format_name(*format)) : std::string(quantization_name(plan.quantization)));
    }
  }
  // SGLang's sharded_state loader runs the post-processing on the empty model and then copies the
  // files in: they must hold the post-processed FP8 layers, which are the device's. shardload
  // writes them as on NVIDIA GPUs with FP8 (kExportPostProcessed, the formats above); its hooks
  // fill before the post-processing.
  if (use == EngineUse::kExport && engine == Engine::kSglang && plan.quantization != Quantization::kNone) {
    refuse(engine,
           "a quantized checkpoint for SGLang's sharded_state loader as loaded: it reads the post-processed "
           "layers, which --engine-post-processed writes as on NVIDIA GPUs with FP8; shardload.sglang's "
           "loader takes the layers as loaded",
           "an unquantized checkpoint, or --engine-post-processed",
           std::string(quantization_name(plan.quantization)));
  }
  // The format itself was checked against the family's row above.
  if (const std::optional<Fp8Format> format = fp8_format(plan);
      use == EngineUse::kExportPostProcessed && (!format || !(*format & kEveryFp8Format))) {
    refuse(engine,
           "--engine-post-processed for this checkpoint: only an FP8 checkpoint's layers are "
           "post-processed; export without the flag",
           "an FP8 checkpoint", std::string(quantization_name(plan.quantization)));
  }
  if (plan.parallel.row_bias != RowBias::kFull) {
    refuse(engine, "divided row biases (the engine adds a row-parallel bias once)", "--row-bias full",
           "--row-bias divided");
  }
  if (plan.parallel.has_dp_fields()) {
    refuse(engine, "a data-parallel layout (not checked against the engine yet)", "no --dp",
           fmt::format("--dp {}", plan.parallel.dp));
  }
  if (plan.physical_experts > static_cast<int>(plan.model.experts)) {
    refuse(engine, "redundant experts (not checked against the engine yet)", "no redundant experts",
           std::to_string(plan.physical_experts - static_cast<int>(plan.model.experts)));
  }
  // The engine's own load places expert p in slot p; another placement is its EPLB's to give.
  for (size_t layer = 0; layer < plan.physical_to_logical.size(); ++layer) {
    const std::vector<int>& row = plan.physical_to_logical[layer];
    for (size_t p = 0; p < row.size(); ++p) {
      if (row[p] == static_cast<int>(p)) continue;
      refuse(engine, "an expert map other than the engine's own placement (not checked yet)",
             fmt::format("physical expert {} holding logical expert {}", p, p),
             fmt::format("logical expert {} (MoE layer {})", row[p], layer));
    }
  }
}

namespace {

// SGLang's post-processing of an FP8 layer on an NVIDIA GPU with FP8 before Blackwell's block-scale
// requantization (fp8.py Fp8LinearMethod / Fp8MoEMethod in their cutlass / Triton / DeepGEMM
// branches, compressed_tensors' W8A8Fp8 schemes). Dense layers: weights of per-tensor and
// per-channel formats transposed to [in, out]; quant_method fp8's per-tensor weight scale spread
// over the rows ([out, 1]: here the one merged scale everywhere), compressed-tensors' reduced to
// one []; one input scale []. Routed experts keep their codes, one per-tensor weight scale per
// expert (the largest of w13's two, equal in layout.md) and one input scale [] for all of them (the
// largest). Block formats keep codes and scale grids as loaded.
void post_process_for_sglang(Fp8Format format, const PlanModule& module, const PlanParam& param,
                             EngineTensor& tensor) {
  const bool experts = module.moe_layer >= 0;
  const bool block = format == kFp8Block || format == kCtBlock;
  switch (param.role) {
    case ParamRole::kData:
      if (!experts && !block && param.dtype == DType::kF8E4M3 && param.shape.size() == 2) {
        tensor.shape = Shape{param.shape[1], param.shape[0]};
        tensor.reduce = EngineReduce::kTranspose;
      }
      break;
    case ParamRole::kWeightScale:
      if (experts && (format == kFp8Tensor || format == kCtTensor) && param.shape.size() == 2) {
        tensor.shape = Shape{param.shape[0]};
        tensor.reduce = EngineReduce::kRowMax;
      } else if (!experts && format == kFp8Tensor) {
        uint64_t rows = 0;
        for (const uint64_t part : module.part_rows) rows += part;
        tensor.shape = Shape{rows, 1};  // the one scale, repeated
      } else if (!experts && format == kCtTensor) {
        tensor.shape = Shape{};
      }
      break;
    case ParamRole::kInputScale:
      tensor.shape = Shape{};
      if (experts) tensor.reduce = EngineReduce::kMax;
      break;
    default:
      break;
  }
}

}  // namespace

std::vector<EngineTensor> engine_tensors(const Plan& plan, const RankPlan& rank, Engine engine,
                                         EngineUse use) {
  const bool post_processed = use == EngineUse::kExportPostProcessed;
  const EngineFamily* row =
      engine == Engine::kVllm || engine == Engine::kSglang
          ? find_engine_family(engine, family_name(plan.model.family))
          : nullptr;
  std::vector<EngineTensor> out;
  for (const PlanParam& param : rank.params) {
    if (!param.exported()) continue;  // post-processing inputs, not part of the layout
    if (!row) {
      out.push_back({param.name, param.dtype, param.shape, &param});
      continue;
    }
    const FusedRows* fused = nullptr;
    const PlanParam* second = nullptr;
    bool fused_second = false;
    for (const FusedRows& rule : row->fused) {
      fused_second = fused_second || param.name.ends_with(rule.second);
      if (param.name.ends_with(rule.first)) fused = &rule;
    }
    if (fused_second) continue;  // written with its first part
    if (fused) {
      const std::string prefix = param.name.substr(0, param.name.size() - fused->first.size());
      const std::string wanted = prefix + std::string(fused->second);
      for (const PlanParam& other : rank.params) {
        if (other.name == wanted) second = &other;
      }
      if (!second || second->dtype != param.dtype || second->shape.size() != param.shape.size() ||
          !std::equal(param.shape.begin() + 1, param.shape.end(), second->shape.begin() + 1)) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("--engine {} holds {} as one tensor", engine_name(engine),
                                prefix + std::string(fused->name)),
                    {.tensor = wanted,
                     .expected = fmt::format("{} rows of {}'s size and dtype", wanted, param.name),
                     .found = second ? fmt::format("{} {}", dtype_name(second->dtype), shape_text(second->shape))
                                     : std::string("missing")});
      }
    }
    DType dtype = is_qk_norm(param.name) && param.dtype == DType::kF32 ? plan.dtype : param.dtype;
    bool leading_one = false;
    for (const DtypeRule& rule : row->dtypes) {
      if (!param.name.ends_with(rule.suffix)) continue;
      dtype = rule.model_dtype ? plan.dtype : rule.to;
      leading_one = rule.leading_one;
    }
    std::string name = plan.model.tie_embeddings && param.name == kTiedEmbedding.from
                           ? std::string(kTiedEmbedding.to)
                           : renamed(param.name, row->renames);
    Shape shape = param.shape;
    if (leading_one) shape.insert(shape.begin(), 1);
    if (fused) {
      name = param.name.substr(0, param.name.size() - fused->first.size()) + std::string(fused->name);
      shape[0] += second->shape[0];
    }
    if (row->model_names != nullptr) name = row->model_names(std::move(name), plan.model);
    EngineTensor& tensor = out.emplace_back(EngineTensor{name, dtype, shape, &param, 0, EngineReduce::kNone, second});
    const PlanModule& module = plan.modules[param.module];
    const bool per_part_scale = module.post == PostProcess::kFp8Requantize &&
                                module.moe_layer < 0 && module.part_rows.size() > 1 &&
                                (param.role == ParamRole::kWeightScale || param.role == ParamRole::kInputScale);
    if (per_part_scale) tensor.shape = Shape{module.part_rows.size()};  // the one scale, repeated
    const std::optional<Fp8Format> format = fp8_format(plan);
    if (post_processed && format) post_process_for_sglang(*format, module, param, tensor);
    // A module's buffers follow its weight, which a packed format names otherwise (weight_packed).
    const std::string& weight_name = param.role == ParamRole::kData ? module.name : param.name;
    for (const Buffers& buffers : row->buffers) {
      if (!weight_name.ends_with(buffers.after)) continue;
      std::string prefix =
          weight_name.substr(0, weight_name.size() - buffers.after.size()) + std::string(buffers.module);
      if (row->model_names != nullptr) prefix = row->model_names(std::move(prefix), plan.model);
      if (buffers.attention_scales) {
        for (std::string_view scale : kAttentionScales)
          out.push_back({prefix + std::string(scale), DType::kF32, Shape{}, nullptr, 1.0f});
      }
      // vLLM's GPTQ and AWQ configs give the attention no quantization method: no KV-cache scales.
      if (plan.quantization == Quantization::kNone || plan.model.quant_format == QuantFormat::kGptq ||
          plan.model.quant_format == QuantFormat::kAwq) {
        continue;
      }
      const bool compressed = plan.model.quant_format == QuantFormat::kCompressedTensors;
      const bool modelopt = plan.model.quant_format == QuantFormat::kModelopt;
      for (const KvCacheSlot& slot : modelopt     ? buffers.kv_cache_modelopt
                                     : compressed ? buffers.kv_cache_ct
                                                  : buffers.kv_cache) {
        out.push_back({prefix + std::string(slot.name), slot.model_dtype ? plan.dtype : DType::kF32,
                       slot.one_element ? Shape{1} : Shape{}, nullptr,
                       post_processed ? kPostProcessedKvCacheScale : slot.value});
      }
    }
    // vLLM's GPTQ MoE method registers its experts' biases ([E_l, N] in the model dtype) whatever the
    // checkpoint holds: zero where it has none, as every checkpoint shardload reads (it refuses others).
    const std::string packed = "_" + plan.format.weight_suffix;
    if (engine == Engine::kVllm && plan.model.quant_format == QuantFormat::kGptq && module.moe_layer >= 0 &&
        param.role == ParamRole::kData && name.ends_with(packed) && param.shape.size() == 3) {
      out.push_back({name.substr(0, name.size() - packed.size()) + "_bias", plan.dtype,
                     Shape{param.shape[0], param.shape[2]}, nullptr, 0.0f});
    }
  }
  return out;
}

}  // namespace shardload
