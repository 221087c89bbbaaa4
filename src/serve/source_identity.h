#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "shardload/checkpoint.h"

namespace shardload::serve {

// A checkpoint's identity as a manifest source records it: "resolved_path", "config_xxh3" and
// "files" {name: {device, inode, size, mtime_ns, header_xxh3}} (hashes as 16 hex digits).
nlohmann::json identity_json(const CheckpointIdentity& identity);

// Why bytes read from the checkpoint `recorded` describes (a manifest source) are not the bytes of
// `now`, in the words a person restarting the server needs ("model.safetensors was rewritten in place
// (modified ...)"); empty when every part matches. A source without a recorded identity (a
// directory kept by an older server) never matches: nothing says what its bytes were read from.
std::string identity_difference(const nlohmann::json& recorded, const CheckpointIdentity& now);

}  // namespace shardload::serve
