#pragma once

#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "shardload/export.h"
#include "shardload/plan.h"

namespace shardload {

// shardload.json's layout fields that no other metadata of a rank file records (layout.md lists
// the rest). Each rank file records them too, so that an edit of shardload.json, or a rank file of
// another export, shows on load even where it changes no tensor's shape (an expert map with two
// experts swapped, row biases divided). The expert map is recorded by its XXH3-64 only.
inline constexpr std::string_view kRecordedLayoutKeys[] = {"quantization",
                                                           "row_bias",
                                                           "no_split_shared_experts",
                                                           "redundant_experts",
                                                           "physical_to_logical_map_xxh3",
                                                           "dp_style",
                                                           "scopes",
                                                           "engine",
                                                           "engine_post_processed"};

// The key whose presence in a rank file's metadata says that it records them: rank files of
// exports written before they were recorded have none, and load as before.
inline constexpr std::string_view kRecordedLayoutMarker = "quantization";

// shardload.json without its "ranks": what finish_export writes for `plan`, written for `engine`
// ("engine" only when it is not kLayout, so that a plain export's manifest is as before;
// "engine_post_processed": true only for EngineUse::kExportPostProcessed).
nlohmann::json manifest_layout(const Plan& plan, Engine engine = Engine::kLayout,
                               EngineUse use = EngineUse::kExport);

// The recorded fields of a manifest, as rank file metadata spells them (strings as they are, other
// values as compact JSON, the expert map as its hash); a field the manifest lacks is left out.
std::map<std::string, std::string> recorded_layout(const nlohmann::json& manifest);

}  // namespace shardload
