#pragma once

// One architecture family, described in one file (src/model/arch/<family>.cc) and listed once in
// registry.cc: how its config.json is read, its sharding table, and what the checkpoint generator
// (make-tiny, src/tiny/) writes for it. Generic code reads these descriptors and never names a
// family.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/arch_table.h"
#include "shardload/dtype.h"
#include "shardload/model.h"
#include "shardload/tensor.h"

namespace shardload::arch {

// Rows and columns of a DeepSeek-V3 FP8 block (weight_block_size [128, 128]).
inline constexpr uint64_t kFp8BlockSize = 128;
// The padding token id of generated checkpoints (config.json and the tokenizer files).
inline constexpr int kTinyPadTokenId = 3;

// Every dimension and count of a generated model (make-tiny); the config.json fields and the tensor
// shapes both come from here, so they cannot disagree. Zero means "the family has no such thing".
struct TinySizes {
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
  uint64_t index_heads = 0;  // DeepSeek-V3.2's indexer
  uint64_t index_head_dim = 0;

  int mtp_layers = 0;  // DeepSeek-V3 num_nextn_predict_layers, ERNIE's mtp_* tensors, Qwen3-Next's mtp.*

  // Qwen3-Next's gated DeltaNet: linear attention in every layer but each full_attention_interval-th.
  int full_attention_interval = 0;  // 0: no linear attention
  uint64_t linear_key_heads = 0;
  uint64_t linear_value_heads = 0;
  uint64_t linear_key_head_dim = 0;
  uint64_t linear_value_head_dim = 0;
  uint64_t linear_conv_kernel = 0;
  bool mxfp4_experts = false;  // gpt-oss under --quant mxfp4: the experts as the Hub stores them

  // Gemma 4: every sliding_pattern-th layer (and the last) has full attention, with global_head_dim x
  // global_kv_heads (K reused as V with k_eq_v); the last kv_shared_layers read an earlier layer's KV
  // cache (with double_wide_mlp, twice the dense MLP); per-layer embeddings of per_layer_hidden a layer.
  int sliding_pattern = 0;
  uint64_t global_head_dim = 0;
  uint64_t global_kv_heads = 0;
  bool k_eq_v = false;
  int kv_shared_layers = 0;
  bool double_wide_mlp = false;
  uint64_t per_layer_hidden = 0;

  // DeepSeek-V4 (ModelConfig's fields of the same names).
  uint64_t o_groups = 0;
  uint64_t o_lora_rank = 0;
  uint64_t hc_mult = 0;
  std::vector<uint64_t> compress_ratio;
  int hash_layers = 0;
  bool score_bias = false;
};

// Where a family's generator writes the checkpoint tensors, in the order Hugging Face writes them.
// The family says which matrices are linear projections: those, and only those, are FP8 under
// --quant (the same set the loader quantizes, is_linear_weight).
class TensorWriter {
 public:
  virtual ~TensorWriter() = default;
  // "<module>.weight" [out, in] of a linear projection (with its scale tensors under --quant).
  virtual void projection(const std::string& module, uint64_t out, uint64_t in) = 0;
  // A weight never quantized: embeddings, routers, heads.
  virtual void weight(const std::string& name, Shape shape, DType dtype = DType::kBF16) = 0;
  // "<module>.weight" [size] of a norm (values around 1).
  virtual void norm(const std::string& module, uint64_t size) = 0;
  virtual void bias(const std::string& name, Shape shape, DType dtype = DType::kBF16) = 0;
  // MXFP4 "<name>_blocks" `blocks` [..., groups, 16] U8 (two E2M1 codes a byte) and "<name>_scales"
  // [..., groups] U8 (E8M0 exponents, kept near 2^0 so that the values stay small).
  virtual void mxfp4(const std::string& name, Shape blocks) = 0;
  // Bytes written as a checkpoint stores them, in `dtype` (one byte an element): FP4 codes (any byte, two
  // E2M1 codes) or, with `exponents`, E8M0 scales (kept near 2^0, as mxfp4's).
  virtual void stored_bytes(const std::string& name, Shape shape, DType dtype, bool exponents) = 0;
};

struct Family {
  std::string_view name;  // config.json's model_type; make-tiny --arch; the plan's "family"
  // The architectures[0] class names read as this family; make-tiny writes the first.
  std::vector<std::string_view> architectures;
  // config.json's field with the number of routed experts; empty for a dense family.
  std::string_view expert_count_field;
  // Reads the family's own fields into m, after the fields every family shares (model_config.cc);
  // m.moe_layer and m.linear_layer have one false entry per layer. Throws Error(kConfig) naming the field.
  void (*read_config)(const nlohmann::json& config, ModelConfig& m);
  const ArchTable& (*table)();

  // make-tiny. Changes to the shared default sizes (tiny_base_sizes).
  void (*tiny_defaults)(TinySizes& m);
  // Changes for --quant fp8-block, after the shared ones (block_fp8_model in src/tiny/).
  void (*tiny_block_fp8)(TinySizes& m);
  // Whether decoder layer i has routed experts (m.experts > 0), by the family's own config rule.
  bool (*tiny_moe_layer)(const TinySizes& m, int layer);
  // The family's config.json fields beyond tiny_common_config's.
  void (*tiny_config)(const TinySizes& m, nlohmann::json& config);
  // Every checkpoint tensor.
  void (*tiny_tensors)(const TinySizes& m, TensorWriter& out);

  // A multimodal class of the family whose config.json nests the text model's fields under
  // text_config and whose checkpoint names them under weight_prefix (the other towers skipped).
  std::string_view multimodal_architecture = {};
  std::string_view multimodal_weight_prefix = {};
  // Empty: the prefix goes before every text-model name (Llama-4's "language_model."). Else the text
  // names that start with this take the prefix in its place and the others keep theirs (Qwen3.5's
  // "model." becomes "model.language_model.", its lm_head and mtp.* stay).
  std::string_view multimodal_replaced_prefix = {};
  // Why make-tiny cannot write the family's FP8 checkpoints (empty: it can).
  std::string_view no_fp8_checkpoints = {};
  // make-tiny --quant mxfp4 (gpt-oss): the family's writer reads TinySizes::mxfp4_experts.
  bool tiny_mxfp4 = false;
  // make-tiny --experts 0 writes the family's dense model: its MoE block is a config switch (Gemma 4's
  // enable_moe_block), the default model has it.
  bool tiny_dense_variant = false;
  // make-tiny's compressed-tensors formats (--quant ct-*) leave the linears these entries match
  // (module_matches) in bf16 and write them as the config's `ignore` (Kimi-K2.5: every linear but the
  // routed experts). Empty: every projection is quantized and `ignore` lists the other linears.
  std::vector<std::string_view> tiny_quant_ignore = {};
  // A family that reads its routed experts either way: this name (relative to "model.layers.{L}.") is
  // the fused 3-D tensor whose presence in the first MoE layer makes the checkpoint's experts stacked
  // (ModelConfig::stacked_experts; rules of When::kStackedExperts, else those of kPerExpertTensors).
  // Empty: the family reads one layout.
  std::string_view stacked_experts_tensor = {};
  // make-tiny --quant ct-w4a16 and the like write weight_shape as int32 (Kimi-K2.5's files), not int64
  // (llm-compressor's).
  bool tiny_int32_weight_shape = false;
  // The checkpoint's name for the decoder layers, where it is not the rank tensors' "model.layers."
  // (DeepSeek-V4's own names: "layers."); layer rules' sources are read under "<this>N.".
  std::string_view checkpoint_layers = {};
};

// Every registered family, in a fixed order (registry.cc).
std::span<const Family* const> families();
// The family named `name` (model_type spelling), or nullptr.
const Family* find_family(std::string_view name);
// The family reading config.json's architectures[0] `architecture`, or nullptr.
const Family* family_for_architecture(std::string_view architecture);

// A text-model tensor's name in a checkpoint whose text model lives under weight_prefix (empty: a
// text-only checkpoint, the name itself).
std::string checkpoint_name(const Family& family, std::string_view weight_prefix, std::string_view text_name);
// The text model's name of a checkpoint tensor, or nullopt for a tensor of another tower (a
// multimodal checkpoint's vision tower and projector).
std::optional<std::string> text_model_name(const Family& family, std::string_view weight_prefix,
                                           std::string_view name);

// Config readers shared by related families (src/model/arch/config_common.cc).

// Qwen-MoE: num_experts, moe_intermediate_size, decoder_sparse_step, mlp_only_layers, and with
// shared_expert shared_expert_intermediate_size.
void read_qwen_moe_config(const nlohmann::json& config, ModelConfig& m, bool shared_expert);
// DeepSeek-style routed experts: n_routed_experts, moe_intermediate_size, n_shared_experts (of
// moe_intermediate_size each), first_k_dense_replace, moe_layer_freq, n_group.
void read_routed_moe_config(const nlohmann::json& config, ModelConfig& m);
// The router's float32 e_score_correction_bias [E] of a MoE layer (DeepSeek-V3 style).
ParamRule score_correction_bias_rule();

// Building blocks of the families' generators (src/model/arch/tiny_common.cc).

// Shared by every family: 8 query heads and 2 KV heads, so tp 4 and 8 need KV-head replication, and
// a vocabulary that is not a multiple of 64, so vocab padding shows.
TinySizes tiny_base_sizes();
// Routed experts divisible by ep 4 and 8; intermediate sizes divisible by 8 (tp 8).
void tiny_add_experts(TinySizes& m, uint64_t per_token);
// rope_theta, rms_norm_eps and max_position_embeddings.
void tiny_rope(nlohmann::json& c, double theta, double eps, int max_positions);
// Qwen2/Qwen3 (dense and MoE) share their attention and window fields; Qwen3 adds head_dim;
// the Qwen MoE families share their expert fields.
void tiny_qwen_config(nlohmann::json& c, const TinySizes& m, int max_positions);
void tiny_qwen3_config(nlohmann::json& c, const TinySizes& m);
void tiny_qwen_moe_config(nlohmann::json& c, const TinySizes& m);
// The DeepSeek-style expert fields read_routed_moe_config reads (but moe_layer_freq), and
// topk_group.
void tiny_routed_moe_config(nlohmann::json& c, const TinySizes& m);
bool tiny_qwen_moe_layer(const TinySizes& m, int layer);
bool tiny_no_moe_layer(const TinySizes& m, int layer);

// q/k/v (with biases when qkv_bias) and o projections, then q/k norms when qk_norm.
void write_attention(const TinySizes& m, TensorWriter& w, const std::string& prefix, bool qkv_bias,
                     bool qk_norm);
// DeepSeek multi-head latent attention.
void write_latent_attention(const TinySizes& m, TensorWriter& w, const std::string& prefix);
// gate_proj, up_proj, down_proj of `size` under prefix ("...mlp.").
void write_mlp(const TinySizes& m, TensorWriter& w, const std::string& prefix, uint64_t size);
// The routed experts' MLPs under prefix + "experts.{x}.".
void write_experts(const TinySizes& m, TensorWriter& w, const std::string& prefix, uint64_t size);
// The same with Mixtral's names (w1 gate, w2 down, w3 up), as Mixtral and MiniMax-M2 write them.
void write_w1_w3_w2_experts(const TinySizes& m, TensorWriter& w, const std::string& prefix, uint64_t size);

// How a family writes the parts of a decoder layer that differ.
struct TinyLayerWriter {
  void (*attention)(const TinySizes& m, TensorWriter& w, const std::string& prefix);
  // The MoE block of a layer; `layer` ends with a dot ("model.layers.3.").
  void (*moe)(const TinySizes& m, TensorWriter& w, const std::string& layer);
  bool (*moe_layer)(const TinySizes& m, int layer);
};
// One decoder layer: norms, attention, and the MoE block or the dense MLP.
void write_decoder_layer(const TinySizes& m, TensorWriter& w, const TinyLayerWriter& layer,
                         const std::string& prefix, int index);
// Embeddings, every decoder layer, the final norm and an untied lm_head.
void write_decoder_model(const TinySizes& m, TensorWriter& w, const TinyLayerWriter& layer);
// DeepSeek-style multi-token prediction: m.mtp_layers whole extra layers after the last one, with
// their own embedding and head copies (loaders skip layers >= num_hidden_layers).
void write_mtp_layers(const TinySizes& m, TensorWriter& w, const TinyLayerWriter& layer);
// A Family::tiny_tensors of the DeepSeek-style families: the decoder model, then its MTP layers.
template <const TinyLayerWriter& kLayer>
void write_model_with_mtp(const TinySizes& m, TensorWriter& w) {
  write_decoder_model(m, w, kLayer);
  write_mtp_layers(m, w, kLayer);
}

}  // namespace shardload::arch
