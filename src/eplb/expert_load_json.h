#pragma once

#include <nlohmann/json.hpp>
#include <vector>

namespace shardload {

// The rows of load statistics from the value of an already parsed `expert_load` member (the server
// reads it out of a request body it parsed). parse_expert_load reads text through it. Throws
// Error(kInvalidArgument, field expert_load) for a value of the wrong shape.
std::vector<std::vector<double>> expert_load_from_json(const nlohmann::json& rows);

}  // namespace shardload
