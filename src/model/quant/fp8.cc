// The "fp8" quant_method (AutoFP8, DeepSeek, Qwen, MiniMax; docs/layout.md "FP8"): F8_E4M3 linear
// weights with a weight_scale per tensor (and an input_scale with static activations), or with
// weight_block_size, a weight_scale_inv per block.
#include <fmt/format.h>

#include <tuple>

#include "core/json_input.h"
#include "model/arch_table.h"
#include "model/quant/fp8_scales.h"
#include "model/quant/quantization_config.h"
#include "shardload/error.h"

namespace shardload {
namespace {

using json = nlohmann::json;

// The modules a checkpoint says it left in the model dtype: vLLM's `ignored_layers`, or the
// `modules_to_not_convert` of Qwen's and MiniMax's FP8 checkpoints (vLLM reads the second when the
// first is absent). shardload reads every linear projection (`*_proj`) of an FP8 checkpoint as FP8
// and every other weight (routers, gates, the LM head) in the model dtype, so a list naming only the
// latter says what shardload assumes; one naming a projection is a checkpoint with unquantized
// projections, which shardload refuses instead of reading its bf16 bytes as FP8 codes.
void check_unquantized_modules(const json& q) {
  for (const char* field : {"ignored_layers", "modules_to_not_convert"}) {
    const auto list = q.find(field);
    if (list == q.end() || list->is_null()) continue;
    if (!list->is_array()) throw quant_error("not a list of module names", field, "array", list->type_name());
    for (const json& entry : *list) {
      if (!entry.is_string()) {
        throw quant_error("not a module name", field, "strings", brief_json(entry));
      }
      const std::string& module = entry.get_ref<const std::string&>();
      if (arch::is_linear_weight(module + ".weight")) {
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
  check_unquantized_modules(q);
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
