#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "serve/manifest.h"
#include "serve/shm_rank_file.h"
#include "shardload/plan.h"

namespace shardload::serve {

// Why the rank files and manifest found in an existing shared-memory directory cannot serve `plan`
// of `model_path` as they are; empty when they can. Checked in the order a person needs the answer:
// a torn commit first (its bytes are garbage whatever the manifest says), then an update the
// manifest never saw finish, then the model (the path, and the files every source was read from:
// `identity` is the checkpoint's now) and the layout (sizes, map, every tensor's dtype, shape and
// offset).
// `files[i]` is the file of rank scope.held.first + i.
std::string reuse_obstacle(const nlohmann::json& manifest, const std::vector<ShmRankFile>& files,
                           const Plan& plan, const std::string& model_path,
                           const CheckpointIdentity& identity, const NodeScope& scope);

// The manifest's physical_to_logical_map when it is a list of integer lists, else nullopt.
std::optional<std::vector<std::vector<int>>> manifest_expert_map(const nlohmann::json& manifest);

}  // namespace shardload::serve
