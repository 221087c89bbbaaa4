#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "export/export_checks.h"
#include "shardload/plan.h"

namespace shardload {

// The plan of the export's own layout: its config.json (copied from the model) planned with the
// layout shardload.json gives (checked by check_manifest), which every rank file is then checked
// against. `optional_present` says whether a parameter a checkpoint may lack was exported (by its
// rank tensor name). Throws Error(kConfig) naming config.json or shardload.json: no config.json, a
// manifest field the layout cannot take, a layout config.json does not plan, or a quantization,
// architecture or scopes other than the plan's.
Plan plan_of_export(const std::string& dir, const nlohmann::json& manifest,
                    const ExportManifest& checked,
                    const std::function<bool(std::string_view)>& optional_present);

}  // namespace shardload
