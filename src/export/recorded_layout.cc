#include "export/recorded_layout.h"

#include <span>

#include "shardload/loader.h"

namespace shardload {

nlohmann::json manifest_layout(const Plan& plan, Engine engine, EngineUse use) {
  const bool moe = plan.physical_experts > 0;
  nlohmann::json manifest = {
      {"format", "shardload/1"},
      {"architecture", plan.model.architecture},
      {"tp_size", plan.parallel.tp},
      {"ep_size", plan.parallel.ep},
      {"moe_tp_size", plan.moe_tp},
      {"dtype", dtype_name(plan.dtype)},
      {"postprocessed", true},
      {"row_bias", row_bias_name(plan.parallel.row_bias)},
      {"no_split_shared_experts", !plan.parallel.split_shared_experts},
      {"redundant_experts", moe ? plan.physical_experts - static_cast<int>(plan.model.experts) : 0},
      {"physical_to_logical_map",
       moe ? nlohmann::json(plan.physical_to_logical) : nlohmann::json::array()},
  };
  add_quantization_fields(manifest, plan.model, plan.quantization);
  if (plan.parallel.has_dp_fields()) {
    manifest["dp_size"] = plan.parallel.dp;
    manifest["dp_style"] = dp_style_name(plan.parallel.dp_style);
    manifest["scopes"] = scopes_json(plan.parallel);
  }
  if (engine != Engine::kLayout) manifest["engine"] = engine_name(engine);
  if (use == EngineUse::kExportPostProcessed) manifest["engine_post_processed"] = true;
  return manifest;
}

std::map<std::string, std::string> recorded_layout(const nlohmann::json& manifest) {
  std::map<std::string, std::string> out;
  if (!manifest.is_object()) return out;
  const auto text = [](const nlohmann::json& value) {
    return value.is_string() ? value.get<std::string>() : value.dump();
  };
  for (const std::string_view key : kRecordedLayoutKeys) {
    if (key == "physical_to_logical_map_xxh3") {
      const auto map = manifest.find("physical_to_logical_map");
      if (map == manifest.end()) continue;
      const std::string dumped = map->dump();
      out.emplace(std::string(key), xxh3_hex(std::as_bytes(std::span(dumped.data(), dumped.size()))));
      continue;
    }
    const auto it = manifest.find(std::string(key));
    if (it != manifest.end()) out.emplace(std::string(key), text(*it));
  }
  return out;
}

}  // namespace shardload
