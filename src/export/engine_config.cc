// config.json as an engine export needs it (engine_config.h).
#include "export/engine_config.h"

#include <set>
#include <string>

namespace shardload {
namespace {

std::string module_of(const std::string& tensor) { return tensor.substr(0, tensor.rfind('.')); }

// vLLM's GPTQ reading: the checkpoint modules of the quantized linear layers (routed experts are another
// method's: vLLM does not look them up).
nlohmann::json gptq_quantized_modules(const Plan& plan) {
  const std::string suffix = "." + plan.format.weight_suffix;
  std::set<std::string> modules;
  for (const RankPlan& rank : plan.ranks) {
    for (const PlanParam& param : rank.params) {
      if (param.role != ParamRole::kData || plan.modules[param.module].moe_layer >= 0 ||
          !param.name.ends_with(suffix)) {
        continue;
      }
      for (const PlanPiece& piece : param.pieces) {
        const std::string& name = plan.sources[piece.source].name;
        if (name.ends_with(suffix)) modules.insert(module_of(name));
      }
    }
  }
  return nlohmann::json(modules);
}

// vLLM's AWQ reading: every module of the checkpoint that holds no quantized weight, as vLLM computes it from
// the checkpoint's tensors.
nlohmann::json awq_unconverted_modules(const Plan& plan) {
  const std::string suffix = "." + plan.format.weight_suffix;
  std::set<std::string> all;
  std::set<std::string> quantized;
  for (const PlanSource& source : plan.sources) {
    all.insert(module_of(source.name));
    if (source.name.ends_with(suffix)) quantized.insert(module_of(source.name));
  }
  for (const std::string& name : plan.skipped) all.insert(module_of(name));
  std::set<std::string> out;
  for (const std::string& module : all) {
    if (!quantized.count(module)) out.insert(module);
  }
  return nlohmann::json(out);
}

}  // namespace

std::optional<nlohmann::json> engine_config(const Plan& plan, Engine engine, const nlohmann::json& config) {
  const bool gptq = plan.model.quant_format == QuantFormat::kGptq;
  if (engine != Engine::kVllm || (!gptq && plan.model.quant_format != QuantFormat::kAwq)) return std::nullopt;
  // Where the checkpoint keeps quantization_config: at the top, or in a multimodal class's text_config.
  nlohmann::json out = config;
  nlohmann::json* quant = nullptr;
  for (nlohmann::json* at : {&out, out.contains("text_config") ? &out["text_config"] : nullptr}) {
    if (at != nullptr && at->is_object() && at->contains("quantization_config") &&
        (*at)["quantization_config"].is_object()) {
      quant = &(*at)["quantization_config"];
      break;
    }
  }
  if (quant == nullptr) return std::nullopt;
  const char* field = gptq ? "modules_in_block_to_quantize" : "modules_to_not_convert";
  if (quant->contains(field) && !(*quant)[field].is_null() && !(*quant)[field].empty()) return std::nullopt;
  (*quant)[field] = gptq ? gptq_quantized_modules(plan) : awq_unconverted_modules(plan);
  return out;
}

}  // namespace shardload
