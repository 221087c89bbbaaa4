// config.json as an engine export needs it (engine_config.h).
#include "export/engine_config.h"

#include <set>
#include <string>

namespace shardload {
namespace {

std::string module_of(const std::string& tensor) { return tensor.substr(0, tensor.rfind('.')); }

// The checkpoint modules of the quantized dense linear layers (routed experts are another method's: vLLM
// does not look them up).
nlohmann::json quantized_dense_modules(const Plan& plan) {
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

// Every module of the checkpoint that holds no quantized weight, as vLLM computes it from the checkpoint's
// tensors.
nlohmann::json unquantized_modules(const Plan& plan) {
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
  using List = WeightFormat::EngineModuleList;
  const List list = plan.format.vllm_module_list;
  if (engine != Engine::kVllm || list == List::kNone) return std::nullopt;
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
  const std::string& field = plan.format.vllm_module_field;
  if (quant->contains(field) && !(*quant)[field].is_null() && !(*quant)[field].empty()) return std::nullopt;
  (*quant)[field] = list == List::kQuantizedDense ? quantized_dense_modules(plan) : unquantized_modules(plan);
  return out;
}

}  // namespace shardload
