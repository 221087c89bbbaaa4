// The generator's model of a real config.json. The sizes are copied from ModelConfig (the same
// reading the planner does); what ModelConfig keeps only as a result (which layers are MoE) is
// fitted to the family's own rule. The model is then checked by a round trip: the config.json the
// generator would write for it must read back as the same ModelConfig, so a field that changes the
// tensors but that the generator cannot express is refused rather than silently dropped.

#include "tiny/tiny_from_config.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "model/config_fields.h"
#include "model/quant/mxfp4.h"
#include "shardload/error.h"
#include "shardload/model.h"
#include "tiny/tiny_config.h"
#include "tiny/tiny_quant.h"

namespace shardload::tiny {

namespace {

using nlohmann::json;

constexpr uint64_t kMaxExpertMlps = uint64_t{1} << 18;  // layers x routed experts
// DeepSeek-V3's multi-token-prediction layers: 1.
constexpr uint64_t kMaxMtpLayers = 16;

Error config_error(const std::string& file, std::string message, std::string field,
                   std::string expected, std::string found) {
  return Error(ErrorKind::kConfig, std::move(message),
               {.file = file,
                .field = std::move(field),
                .expected = std::move(expected),
                .found = std::move(found)});
}

// ModelConfig's errors name "config.json"; here the file is the one --config named.
Error in_file(const Error& e, const std::string& file) {
  ErrorDetails details = e.details();
  details.file = file;
  return Error(e.kind(), e.message(), std::move(details));
}

bool same_moe_layers(const TinyModel& m, const std::vector<bool>& want) {
  for (int i = 0; i < m.layers; ++i) {
    if (is_moe_layer(m, i) != want[static_cast<size_t>(i)]) return false;
  }
  return true;
}

// Sets the family's rule parameters (first MoE layer and step, or a list of dense layers) so that
// its rule gives exactly the config's MoE layers; the MTP layers past the last one then follow the
// same rule, as they do in the model. Quadratic in the layers, which are bounded.
bool fit_moe_layers(TinyModel& m, const std::vector<bool>& want) {
  const auto first = std::find(want.begin(), want.end(), true);
  m.first_moe_layer = static_cast<int>(first - want.begin());
  for (int step = 1; step <= m.layers; ++step) {
    m.sparse_step = step;
    if (same_moe_layers(m, want)) return true;
  }
  m.first_moe_layer = 0;
  m.sparse_step = 1;
  for (int i = 0; i < m.layers; ++i) {
    if (!want[static_cast<size_t>(i)]) m.mlp_only_layers.push_back(i);
  }
  return same_moe_layers(m, want);
}

// The interval of full-attention layers that gives the config's linear-attention layers (0: none);
// another pattern fails the round trip.
int full_attention_interval(const std::vector<bool>& linear) {
  if (std::find(linear.begin(), linear.end(), true) == linear.end()) return 0;
  const auto full = std::find(linear.begin(), linear.end(), false);
  return full == linear.end() ? static_cast<int>(linear.size()) + 1 : static_cast<int>(full - linear.begin()) + 1;
}

Quant quant_of(const ModelConfig& c, const std::string& file) {
  if (c.quant_format == QuantFormat::kCompressedTensors && c.quantization == Quantization::kWna16) {
    if (c.weight_bits == 4 && c.group_size == kTinyIntGroup) return c.zero_points ? Quant::kCtW4a16Asym : Quant::kCtW4a16;
    if (c.weight_bits == 8 && c.group_size == kWholeRow && !c.zero_points) return Quant::kCtW8a16;
    throw config_error(file, "make-tiny writes int4 in 32-value groups and int8 per channel only",
                       "quantization_config.config_groups.*.weights", "int4 group 32, or int8 channel symmetric",
                       fmt::format("int{} {}", c.weight_bits, c.group_size == kWholeRow ? std::string("channel")
                                                                                         : fmt::format("group {}", c.group_size)));
  }
  if (c.quant_format == QuantFormat::kCompressedTensors && c.quantization == Quantization::kInt8) {
    return Quant::kCtW8a8;  // the only int-quantized scheme read
  }
  if (c.quant_format == QuantFormat::kCompressedTensors && c.quantization == Quantization::kNvfp4) {
    return Quant::kCtNvfp4;
  }
  if (c.quant_format == QuantFormat::kModelopt) return Quant::kModeloptNvfp4;  // NVFP4, the only one read
  if (c.quant_format == QuantFormat::kCompressedTensors) {
    if (c.weight_strategy == WeightStrategy::kTensor) return Quant::kCtTensor;
    if (c.weight_strategy == WeightStrategy::kChannel) return Quant::kCtChannel;
    if (c.block_rows != kFp8Block || c.block_cols != kFp8Block) {
      throw config_error(file, "make-tiny writes 128 x 128 FP8 blocks only",
                         "quantization_config.config_groups.*.weights.block_structure", "[128, 128]",
                         fmt::format("[{}, {}]", c.block_rows, c.block_cols));
    }
    return Quant::kCtBlock;
  }
  if (c.expert_format == &mxfp4_format()) return Quant::kMxfp4;
  if (c.quant_format == QuantFormat::kAwq) {
    if (c.group_size == kTinyIntGroup && c.zero_points) return Quant::kAwq;
    throw config_error(file, "make-tiny writes AWQ in 32-value groups with zero points only", "quantization_config",
                       "group_size 32, zero_point true",
                       fmt::format("group_size {}, zero_point {}", c.group_size, c.zero_points));
  }
  if (c.quant_format == QuantFormat::kGptq) {
    if (c.weight_bits == 4 && c.group_size == kTinyIntGroup) return Quant::kGptq;
    if (c.weight_bits == 4 && c.group_size == kWholeRow) return Quant::kGptqChannel;
    throw config_error(file, "make-tiny writes GPTQ int4 in 32-value groups or per column only", "quantization_config",
                       "bits 4, group_size 32 or -1",
                       fmt::format("bits {}, group_size {}", c.weight_bits,
                                   c.group_size == kWholeRow ? std::string("-1") : std::to_string(c.group_size)));
  }
  switch (c.quantization) {
    case Quantization::kNone:
      return Quant::kNone;
    case Quantization::kFp8:
      return Quant::kFp8;
    case Quantization::kFp8Block:
      if (c.block_rows != kFp8Block || c.block_cols != kFp8Block) {
        throw config_error(file, "make-tiny writes 128 x 128 FP8 blocks only",
                           "quantization_config.weight_block_size", "[128, 128]",
                           fmt::format("[{}, {}]", c.block_rows, c.block_cols));
      }
      return Quant::kFp8Block;
    case Quantization::kFp8Dynamic:
    case Quantization::kWna16:
    case Quantization::kInt8:
    case Quantization::kNvfp4:
    case Quantization::kGptq:
    case Quantization::kAwq:
      break;
  }
  throw config_error(file, "unsupported quantization", "quantization_config", "fp8", "?");
}

// The fields of ModelConfig that decide the tensors, by config.json name, as text.
std::vector<std::pair<const char*, std::string>> tensor_fields(const ModelConfig& c) {
  std::vector<std::string> moe;
  for (bool b : c.moe_layer) moe.emplace_back(b ? "1" : "0");
  std::vector<std::string> linear;
  for (bool b : c.linear_layer) linear.emplace_back(b ? "1" : "0");
  std::vector<std::string> global;
  for (bool b : c.global_layer) global.emplace_back(b ? "1" : "0");
  return {
      {"torch_dtype", std::string(dtype_name(c.dtype))},
      {"hidden_size", std::to_string(c.hidden)},
      {"intermediate_size", std::to_string(c.intermediate)},
      {"num_attention_heads", std::to_string(c.heads)},
      {"num_key_value_heads", std::to_string(c.kv_heads)},
      {"head_dim", std::to_string(c.head_dim)},
      {"vocab_size", std::to_string(c.vocab)},
      {"num_hidden_layers", std::to_string(c.layers)},
      {"tie_word_embeddings", c.tie_embeddings ? "true" : "false"},
      {"attention_bias", c.attention_bias ? "true" : "false"},
      {"attention_bias (q/k/v)", c.qkv_bias ? "true" : "false"},
      {"mlp_bias", c.mlp_bias ? "true" : "false"},
      {"routed experts", std::to_string(c.experts)},
      {"moe_intermediate_size", std::to_string(c.moe_intermediate)},
      {"shared experts' intermediate size", std::to_string(c.shared_intermediate)},
      {"MoE layers", fmt::format("{}", fmt::join(moe, ""))},
      {"q_lora_rank", std::to_string(c.q_lora_rank)},
      {"kv_lora_rank", std::to_string(c.kv_lora_rank)},
      {"qk_nope_head_dim", std::to_string(c.qk_nope_head_dim)},
      {"qk_rope_head_dim", std::to_string(c.qk_rope_head_dim)},
      {"v_head_dim", std::to_string(c.v_head_dim)},
      {"linear-attention layers", fmt::format("{}", fmt::join(linear, ""))},
      {"linear_num_key_heads", std::to_string(c.linear_key_heads)},
      {"linear_num_value_heads", std::to_string(c.linear_value_heads)},
      {"linear_key_head_dim", std::to_string(c.linear_key_head_dim)},
      {"linear_value_head_dim", std::to_string(c.linear_value_head_dim)},
      {"linear_conv_kernel_dim", std::to_string(c.linear_conv_kernel)},
      {"full-attention layers (Gemma 4)", fmt::format("{}", fmt::join(global, ""))},
      {"global_head_dim", std::to_string(c.global_head_dim)},
      {"num_global_key_value_heads", std::to_string(c.global_kv_heads)},
      {"attention_k_eq_v", c.k_eq_v ? "true" : "false"},
      {"num_kv_shared_layers", std::to_string(c.layers - c.first_kv_shared_layer)},
      {"use_double_wide_mlp", c.double_wide_mlp ? "true" : "false"},
      {"hidden_size_per_layer_input", std::to_string(c.per_layer_hidden)},
      {"o_groups", std::to_string(c.o_groups)},
      {"o_lora_rank", std::to_string(c.o_lora_rank)},
      {"hc_mult", std::to_string(c.hc_mult)},
      {"compress_ratios", fmt::format("{}", fmt::join(c.compress_ratio, ","))},
      {"num_hash_layers", std::to_string(c.hash_layers)},
      {"num_experts_per_tok (hash routing)", std::to_string(c.hash_topk)},
      {"topk_method (score bias)", c.score_bias ? "noaux_tc" : "other"},
      {"index_n_heads", std::to_string(c.index_heads)},
      {"index_head_dim", std::to_string(c.index_head_dim)},
      {"vocab_size_per_layer_input", std::to_string(c.per_layer_vocab)},
      {"quantization_config", std::string(quantization_label(c, c.quantization))},
      {"quantization_config weights.strategy", std::string(weight_strategy_name(c.weight_strategy))},
      {"quantization_config.activation_scheme", c.static_activations ? "static" : "dynamic"},
      {"quantization_config.weight_block_size",
       fmt::format("[{}, {}]", c.block_rows, c.block_cols)},
  };
}

// Throws when the generator's own config.json for m reads back differently from the given one.
void check_round_trip(const TinyModel& m, const ModelConfig& given, const std::string& file) {
  ModelConfig ours;
  try {
    ours = ModelConfig::from_json(config_json(m));
  } catch (const Error& e) {
    throw in_file(e, file);
  }
  const auto want = tensor_fields(given);
  const auto have = tensor_fields(ours);
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i].second == have[i].second) continue;
    throw config_error(
        file, "make-tiny cannot write the tensors of this config", want[i].first,
        fmt::format("{} (what the {} generator writes)", have[i].second, m.family->name),
        want[i].second);
  }
}

}  // namespace

TinyModel model_from_config(const json& config, const std::string& file) {
  ModelConfig c;
  try {
    c = ModelConfig::from_json(config);
  } catch (const Error& e) {
    throw in_file(e, file);
  }
  if (c.layers > kMaxTinyLayers) {
    throw config_error(file, "too many layers for make-tiny", "num_hidden_layers",
                       fmt::format("at most {}", kMaxTinyLayers), std::to_string(c.layers));
  }
  if (c.experts * static_cast<uint64_t>(c.layers) > kMaxExpertMlps) {
    throw config_error(file, "too many experts for make-tiny", "routed experts x layers",
                       fmt::format("at most {}", kMaxExpertMlps),
                       std::to_string(c.experts * static_cast<uint64_t>(c.layers)));
  }
  if (c.dtype != DType::kBF16) {
    throw config_error(file, "make-tiny writes bfloat16 checkpoints only", "torch_dtype",
                       "bfloat16", std::string(dtype_name(c.dtype)));
  }
  TinyModel m;
  m.family = c.family;
  m.hidden = c.hidden;
  m.intermediate = c.intermediate;
  m.heads = c.heads;
  m.kv_heads = c.kv_heads;
  m.head_dim = c.head_dim;
  m.vocab = c.vocab;
  m.layers = c.layers;
  m.tie_embeddings = c.tie_embeddings;
  m.experts = c.experts;
  m.experts_per_token = std::min<uint64_t>(c.experts, 1);  // config.json only, never a tensor
  m.moe_intermediate = c.moe_intermediate;
  m.shared_intermediate = c.shared_intermediate;
  m.shared_experts = c.moe_intermediate == 0 ? 0 : c.shared_intermediate / c.moe_intermediate;
  m.q_lora_rank = c.q_lora_rank;
  m.kv_lora_rank = c.kv_lora_rank;
  m.qk_nope_head_dim = c.qk_nope_head_dim;
  m.qk_rope_head_dim = c.qk_rope_head_dim;
  m.v_head_dim = c.v_head_dim;
  m.n_group = std::max<uint64_t>(c.n_group, 1);
  m.index_heads = c.index_heads;
  m.index_head_dim = c.index_head_dim;
  m.linear_key_heads = c.linear_key_heads;
  m.linear_value_heads = c.linear_value_heads;
  m.linear_key_head_dim = c.linear_key_head_dim;
  m.linear_value_head_dim = c.linear_value_head_dim;
  m.linear_conv_kernel = c.linear_conv_kernel;
  m.full_attention_interval = full_attention_interval(c.linear_layer);
  // Gemma 4: every sliding_pattern-th layer full (the first full one's place), the round trip checks the rest.
  const auto first_global = std::find(c.global_layer.begin(), c.global_layer.end(), true);
  m.sliding_pattern = static_cast<int>(first_global - c.global_layer.begin()) + 1;
  m.global_head_dim = c.global_head_dim;
  m.global_kv_heads = c.global_kv_heads;
  m.k_eq_v = c.k_eq_v;
  m.kv_shared_layers = c.layers - c.first_kv_shared_layer;
  m.double_wide_mlp = c.double_wide_mlp;
  m.per_layer_hidden = c.per_layer_hidden;
  m.o_groups = c.o_groups;
  m.o_lora_rank = c.o_lora_rank;
  m.hc_mult = c.hc_mult;
  m.compress_ratio = c.compress_ratio;
  m.hash_layers = c.hash_layers;
  m.score_bias = c.score_bias;
  if (c.hash_topk > 0) m.experts_per_token = c.hash_topk;  // DeepSeek-V4's tid2eid has one column each
  // Written by the families that have MTP layers (the planner skips them; a checkpoint has them):
  // DeepSeek's and Qwen3-Next's field, or Qwen3.5's (in a multimodal config's text_config).
  const json& text = config.contains("text_config") && config.at("text_config").is_object()
                         ? config.at("text_config")
                         : config;
  const char* mtp_field =
      text.contains("mtp_num_hidden_layers") ? "mtp_num_hidden_layers" : "num_nextn_predict_layers";
  try {
    m.mtp_layers = static_cast<int>(config::get_uint(text, mtp_field, 0, kMaxMtpLayers));
  } catch (const Error& e) {
    throw in_file(e, file);
  }
  m.quant = quant_of(c, file);
  m.mxfp4_experts = m.quant == Quant::kMxfp4;
  m.static_activations = c.static_activations;
  m.weight_prefix = c.weight_prefix;
  if (m.experts > 0 && !fit_moe_layers(m, c.moe_layer)) {
    throw config_error(file, "make-tiny cannot write this pattern of MoE layers", "MoE layers",
                       fmt::format("a pattern of the {} generator's rule", m.family->name),
                       "another");
  }
  check_round_trip(m, c, file);
  return m;
}

}  // namespace shardload::tiny
