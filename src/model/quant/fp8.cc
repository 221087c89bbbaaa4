// The "fp8" quant_method (AutoFP8, DeepSeek, Qwen, MiniMax; docs/layout.md "FP8"): F8_E4M3 linear
// weights with a weight_scale per tensor (and an input_scale with static activations), or with
// weight_block_size, a weight_scale_inv per block.
#include <fmt/format.h>

#include <charconv>
#include <string>
#include <string_view>
#include <tuple>

#include "core/json_input.h"
#include "model/arch/family.h"
#include "model/arch_table.h"
#include "model/quant/fp8_scales.h"
#include "model/quant/quantization_config.h"
#include "shardload/error.h"

namespace shardload {
namespace {

using json = nlohmann::json;

// The last dot-separated component of a module path ("model.layers.3.self_attn.o_proj": o_proj).
std::string_view last_component(std::string_view module) {
  const size_t dot = module.rfind('.');
  return dot == std::string_view::npos ? module : module.substr(dot + 1);
}

// Whether an entry of the unquantized list names a projection shardload reads as FP8: a linear
// projection of the family's table (by its module's name, as "self_attn.o_proj" or
// "model.layers.0.self_attn.o_proj" name it), in a layer the planner reads. Entries naming no such
// projection change nothing shardload reads: GLM-5.1's FP8 checkpoint lists "self_attn.indexers_proj"
// (as sglang-jax PR 1111 quotes it), a module of neither transformers' model nor vLLM's (the indexer's
// weights_proj is BF16 here anyway), and layers at or past num_hidden_layers are multi-token-prediction
// layers, skipped.
bool names_fp8_projection(std::string_view module, const ModelConfig& m) {
  if (!arch::is_linear_weight(std::string(module) + ".weight")) return false;
  constexpr std::string_view kLayers = "model.layers.";
  if (module.starts_with(kLayers)) {
    const std::string_view rest = module.substr(kLayers.size());
    int layer = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), layer);
    if (ec == std::errc() && layer >= m.layers) return false;
  }
  if (m.family == nullptr) return true;
  const arch::ArchTable& table = arch::table_for(m.family);
  const std::string_view name = last_component(module);
  for (const auto* rules : {&table.model, &table.layer}) {
    for (const arch::ParamRule& rule : *rules) {
      for (const arch::Part& part : rule.parts) {
        std::string_view source = part.source;
        if (!source.ends_with(".weight") || !arch::is_linear_weight(source)) continue;
        source.remove_suffix(std::string_view(".weight").size());
        if (last_component(source) == name) return true;
      }
    }
  }
  return false;
}

// The modules a checkpoint says it left in the model dtype: vLLM's `ignored_layers`, or the
// `modules_to_not_convert` of Qwen's, MiniMax's and GLM's FP8 checkpoints (vLLM reads the second
// when the first is absent). shardload reads every linear projection (`*_proj`) of an FP8 checkpoint
// as FP8 and every other weight (routers, gates, the LM head) in the model dtype, so a list naming
// only the latter (or nothing shardload reads, names_fp8_projection) says what shardload assumes; one
// naming a projection is a checkpoint with unquantized projections, which shardload refuses instead
// of reading its bf16 bytes as FP8 codes.
void check_unquantized_modules(const json& q, const ModelConfig& m) {
  for (const char* field : {"ignored_layers", "modules_to_not_convert"}) {
    const auto list = q.find(field);
    if (list == q.end() || list->is_null()) continue;
    if (!list->is_array()) throw quant_error("not a list of module names", field, "array", list->type_name());
    for (const json& entry : *list) {
      if (!entry.is_string()) {
        throw quant_error("not a module name", field, "strings", brief_json(entry));
      }
      if (names_fp8_projection(entry.get_ref<const std::string&>(), m)) {
        throw quant_error("a linear projection left unquantized in an FP8 checkpoint is not supported",
                          field, "only routers, gates and lm_head (modules shardload keeps unquantized)",
                          brief_json(entry));
      }
    }
  }
}

}  // namespace

void read_fp8(const json& q, ModelConfig& m) {
  const auto scheme = q.find("activation_scheme");
  const std::string activations =
      scheme == q.end() || scheme->is_null() ? "dynamic" : scheme->is_string() ? scheme->get<std::string>()
                                                                               : brief_json(*scheme);
  if (activations != "static" && activations != "dynamic") {
    throw quant_error("unknown activation scheme", "activation_scheme", "static or dynamic", activations);
  }
  m.static_activations = activations == "static";
  // DeepSeek writes "e4m3", MiniMax-M2 torch's dtype name "float8_e4m3fn": the same format.
  if (const auto fmt_it = q.find("fmt");
      fmt_it != q.end() && *fmt_it != "e4m3" && *fmt_it != "float8_e4m3fn") {
    throw quant_error("unsupported FP8 format", "fmt", "e4m3 or float8_e4m3fn", brief_json(*fmt_it));
  }
  check_unquantized_modules(q, m);
  const auto block = q.find("weight_block_size");
  if (block == q.end() || block->is_null()) {
    m.quantization = Quantization::kFp8;
    return;
  }
  m.quantization = Quantization::kFp8Block;
  std::tie(m.block_rows, m.block_cols) = read_block_size(&*block, "weight_block_size");
}


WeightFormat fp8_weight_format(const ModelConfig& m) {
  if (m.quantization == Quantization::kFp8Block) return block_fp8_format(m, "weight_scale_inv");
  return per_tensor_fp8_format(m);
}

}  // namespace shardload
