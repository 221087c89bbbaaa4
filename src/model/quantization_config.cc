// quantization_config of config.json: the FP8 formats of docs/layout.md, anything else refused.
#include <fmt/format.h>

#include <tuple>

#include "core/json_input.h"
#include "model/arch_table.h"
#include "model/quantization_config.h"
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

Error quant_error(std::string message, const std::string& field, std::string expected, std::string found) {
  return Error(ErrorKind::kConfig, std::move(message),
               {.file = "config.json", .field = "quantization_config." + field,
                .expected = std::move(expected), .found = std::move(found)});
}

std::pair<uint64_t, uint64_t> read_block_size(const json* block, const std::string& field) {
  // Real checkpoints use 128; a block larger than any tensor dimension would make no sense.
  constexpr uint64_t kMaxBlockSize = uint64_t{1} << 20;
  const auto size_ok = [](const json& v) {
    return v.is_number_integer() && v.get<int64_t>() > 0 && v.get<uint64_t>() <= kMaxBlockSize;
  };
  if (block == nullptr || !block->is_array() || block->size() != 2 || !size_ok((*block)[0]) ||
      !size_ok((*block)[1])) {
    throw quant_error("not two positive integers", field, fmt::format("[rows, cols], each 1-{}", kMaxBlockSize),
                      block == nullptr ? "(missing)" : brief_json(*block));
  }
  return {(*block)[0].get<uint64_t>(), (*block)[1].get<uint64_t>()};
}

std::string_view quantization_name(Quantization quantization) {
  switch (quantization) {
    case Quantization::kNone: return "none";
    case Quantization::kFp8: return "fp8";
    case Quantization::kFp8Block: return "fp8-block";
    case Quantization::kFp8Dynamic: return "fp8-dynamic";
  }
  return "?";
}

std::string_view quantization_label(const ModelConfig& model, Quantization loaded) {
  return model.quant_format == QuantFormat::kCompressedTensors ? "compressed-tensors"
                                                                : quantization_name(loaded);
}

void add_quantization_fields(json& out, const ModelConfig& model, Quantization loaded) {
  out["quantization"] = quantization_label(model, loaded);
  if (model.quant_format == QuantFormat::kCompressedTensors) {
    out["weight_strategy"] = weight_strategy_name(model.weight_strategy);
    out["activation_scheme"] = model.static_activations ? "static" : "dynamic";
  }
}

std::string_view weight_strategy_name(WeightStrategy strategy) {
  switch (strategy) {
    case WeightStrategy::kTensor: return "tensor";
    case WeightStrategy::kChannel: return "channel";
    case WeightStrategy::kBlock: return "block";
  }
  return "?";
}

void read_quantization(const json& config, ModelConfig& m) {
  auto it = config.find("quantization_config");
  // Checkpoints of compressed-tensors before it was a transformers quantizer call it so.
  if (it == config.end() || it->is_null()) it = config.find("compression_config");
  if (it == config.end() || it->is_null()) return;
  const json& q = *it;
  if (!q.is_object()) throw quant_error("not a JSON object", "", "object", q.type_name());
  const auto method = q.find("quant_method");
  const std::string name = method == q.end() ? "(missing)" : method->is_string() ? method->get<std::string>()
                                                                                  : brief_json(*method);
  if (name == "compressed-tensors") {
    read_compressed_tensors(q, m);
    return;
  }
  if (name == "mxfp4") {  // gpt-oss: only the experts, whose rules keep the codes (Keep::kCheckpoint)
    m.mxfp4_experts = true;
    return;
  }
  if (name != "fp8") {
    throw quant_error("unsupported quantization method", "quant_method", "fp8, compressed-tensors or mxfp4 (gpt-oss)",
                      name);
  }
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

}  // namespace shardload
