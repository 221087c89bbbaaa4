#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "shardload/plan.h"
#include "shardload/reload.h"

namespace shardload::serve {

// The "ranks" member of manifest.json: per rank its file name, file size and exported tensors
// (dtype, shape, offset from the start of the file, nbytes). Internal FP8 helper parameters are in
// the file but not listed: they are not part of the rank's export.
nlohmann::json manifest_ranks(const Plan& plan);

// The whole manifest (layout.md "Weight server shared memory"). `update_in_progress` is an
// extension: set while an update may be rewriting bytes, so that a server killed after a commit
// ended but before the manifest caught up is not mistaken for a clean one on restart.
nlohmann::json make_manifest(std::string_view name, const LiveModel& live, bool update_in_progress);

// Writes DIR/manifest.json through a temporary file and a rename: a reader sees the old manifest or
// the new one, never a part. Throws Error(kIo).
void write_manifest(const std::string& dir, const nlohmann::json& manifest);

// DIR/manifest.json parsed; nullopt, with the reason in `why`, when it is missing or not a JSON
// object.
std::optional<nlohmann::json> read_manifest(const std::string& dir, std::string* why);

}  // namespace shardload::serve
